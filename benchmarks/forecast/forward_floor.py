"""How much of a long-context forecast is attention: each backend's forward pass beside the
same forward with every attention layer replaced by a free stub (the *floor* no backend can go
below), for the shipped context-2,048 models.

    python -m benchmarks.forecast.forward_floor
    python -m benchmarks.forecast.forward_floor --models informer-ettm1-h96-c2048 --repeats 40

One window (batch 1, the shipped weights, a random input), 1 torch thread by default, inference
mode, in-process; the backends and the stub alternate (a slow spell of a shared machine hits all
alike), each figure the median of ``--repeats``. The stub keeps every tensor's shape (see
:func:`benchmarks.attention.common.attention_replaced`). ``× flash`` and ``× full`` are what a
backend would gain per forward if attention were all it did differently. ``--parts`` adds each
block's median milliseconds (embeddings, encoder layers with their attention and feed-forward,
distilling layers, the decoder's parts, linear path, projection; forward hooks) and the rest
(RevIN, casts, concatenations). Writes ``benchmarks/results/forward-floor-cpu.md``.
``--smoke``: the ETTh1 horizon-24 model, 1 repeat.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from benchmarks.attention.common import attention_replaced
from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report, table
from models.informer import layers
from models.informer.forecaster import InformerForecaster
from models.names import BACKEND_NAMES

MODELS = ("informer-ettm1-h96-c2048", "informer-ettm1-h288-c2048")
FLOOR = "no attention (floor)"


def _timed_parts(net: torch.nn.Module, times: dict[str, list[float]]) -> list[Any]:
    """Forward hooks that append each block's seconds per call to ``times[block]``."""
    blocks = ["enc_embedding", "dec_embedding", "linear", "projection", "encoder_norm"]
    for name, _ in net.named_children():
        if name in ("encoder", "distil", "decoder"):
            blocks += [f"{name}.{i}" for i in range(len(getattr(net, name)))]
    for i in range(len(getattr(net, "encoder", []))):
        blocks += [f"encoder.{i}.attention", f"encoder.{i}.ff"]
    for i in range(len(getattr(net, "decoder", []))):
        blocks += [f"decoder.{i}.{part}" for part in ("self_attention", "cross_attention", "ff")]
    modules = dict(net.named_modules())
    handles, started = [], {}
    for block in blocks:
        module = modules.get(block)
        if module is None:
            continue

        def pre(_m: Any, _a: Any, block: str = block) -> None:
            started[block] = time.perf_counter()

        def post(_m: Any, _a: Any, _o: Any, block: str = block) -> None:
            times.setdefault(block, []).append(time.perf_counter() - started[block])

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


def measure(
    model: str, repeats: int, parts: dict[str, dict[str, float]] | None = None
) -> dict[str, float]:
    """Median milliseconds per forward for each backend and the floor; with ``parts``, also
    each block's median per run (``parts[run][block]``)."""
    forecaster = InformerForecaster.load(model)
    net = forecaster.model.eval()
    c = net.config
    torch.manual_seed(0)
    x, marks = torch.randn(1, c.seq_len, c.enc_in), torch.randn(1, c.seq_len, c.time_features)
    dec_len = c.label_len + c.pred_len
    x_dec, marks_dec = torch.randn(1, dec_len, c.dec_in), torch.randn(1, dec_len, c.time_features)
    runs = [(FLOOR, "flash", True), *((b, b, False) for b in BACKEND_NAMES)]
    times: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    blocks: dict[str, dict[str, list[float]]] = {name: {} for name, _, _ in runs}
    with torch.inference_mode():
        for round_ in range(repeats + 1):  # the first round warms up
            for name, backend, stub in runs:
                hooks = _timed_parts(net, blocks[name]) if parts is not None and round_ else []
                with attention_replaced(layers, stub):
                    started = time.perf_counter()
                    net(x, marks, x_dec, marks_dec, backend)
                    if round_:
                        times[name].append(time.perf_counter() - started)
                for h in hooks:
                    h.remove()
    if parts is not None:
        for name, per_block in blocks.items():
            parts[name] = {b: statistics.median(t) * 1e3 for b, t in per_block.items()}
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def parts_table(model: str, parts: dict[str, dict[str, float]], totals: dict[str, float]) -> str:
    """Blocks as rows, runs as columns; the nested blocks (``encoder.0.attention``) are inside
    their layer's figure, and *rest* is the forward minus the top-level blocks."""
    runs = list(parts)
    blocks = list(dict.fromkeys(b for p in parts.values() for b in p))
    top = [b for b in blocks if b.count(".") <= 1]
    cells = [
        [f"{'  ↳ ' if block not in top else ''}{block}"]
        + [f"{parts[r].get(block, float('nan')):.2f}" for r in runs]
        for block in blocks
    ]
    cells.append(
        ["rest", *(f"{totals[r] - sum(parts[r].get(b, 0.0) for b in top):.2f}" for r in runs)]
    )
    cells.append(["**forward**", *(f"{totals[r]:.2f}" for r in runs)])
    return table([f"{model}: ms per block", *runs], cells, "l" + "r" * len(runs))


def floor_table(results: dict[str, dict[str, float]]) -> str:
    """Every model's forwards beside its floor and its ``flash`` and ``full``."""
    cells = []
    for model, ms in results.items():
        floor, flash, full = ms[FLOOR], ms["flash"], ms["full"]
        for name, value in ms.items():
            attention = "—" if name == FLOOR else f"{value - floor:.1f}"
            ratios = [f"{flash / value:.2f}x", f"{full / value:.1f}x"]
            cells.append([model, name, f"{value:.1f}", attention, *ratios])
    columns = ["model", "forward", "ms", "attention ms (above the floor)", "× flash", "× full"]
    return table(columns, cells, "llrrrr")


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.names("--models", MODELS),
        cli.repeats(25),
        cli.threads(1),
        cli.out(RESULTS / "forward-floor-cpu.md"),
    )
    p.add_argument("--parts", action="store_true", help="and each block's time per run")
    args = cli.parse(p, argv, models=["informer-etth1-h24"], repeats=1)
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.forecast.forward_floor", argv)
    parts: dict[str, dict[str, dict[str, float]]] = {m: {} for m in args.models}
    results = {m: measure(m, args.repeats, parts[m] if args.parts else None) for m in args.models}
    report.add(
        f"One forward pass, batch 1, {args.threads} torch thread(s), in-process, median of "
        f"{args.repeats} (backends and the attention-free floor alternated).",
        floor_table(results),
        *(parts_table(m, parts[m], results[m]) for m in args.models if args.parts),
    )
    report.write(args.out)


if __name__ == "__main__":
    main()
