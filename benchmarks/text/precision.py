"""Precision against speed and quality, in-process: all-MiniLM-L6-v2 in float32, bfloat16 and
int8 (with different layers kept in float), and the shipped Informers in bfloat16 and int8.

    .venv/bin/python -m benchmarks.text.precision [--rounds 5] [--threads 2] [--write]

Text: stdlib docstrings (``models.text.quality.corpus``, cut at 256 tokens) embedded with ``flash`` at
batch 32 and at batch 1, each configuration timed once per round in rotation (A, B, C, A, B, C,
...), since other processes share this CPU: the median and the best round in texts/s, and the
speed-up over float32 by both. Quality: min and mean cosine of each text's embedding to float32's.

Forecasters: test MSE (scaled units, as ``attnserve evaluate``) of the float32, bfloat16 and int8
(plain dynamic, no calibration) network on the checkpoint's test windows (every ``--stride``-th
for the context-2,048 ETTm1 models), with the checkpoint's default backend.

``--write`` also writes ``benchmarks/results/precision-cpu.md``. ``--smoke``: 8 texts, one round,
the ETTh1 horizon-24 Informer on 64 windows.
"""

from __future__ import annotations

import os
import statistics
from functools import partial

import torch
import torch.nn.functional as F

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report, table
from benchmarks.harness.timing import Timed, alternating
from models.precision import int8_engine, native_bf16
from models.text import SentenceEncoder
from models.text.quality.corpus import stdlib_docstrings

OUT = RESULTS / "precision-cpu.md"
BATCH = 32
# int8 configurations: SmoothQuant-calibrated (the served default) or plain, and linear layers
# left in float32 (regular expressions over the module names of models.text.network.bert:
# layers.<i>.qkv / attn_out / ffn_in / ffn_out).
INT8: dict[str, tuple[tuple[str, ...], bool | tuple[str, ...]]] = {
    "int8 (smoothed, every linear; served)": ((), True),
    "int8 (smoothed ffn_out only, the rest plain)": ((), (r"\.ffn_out$",)),
    "int8 (plain, every linear)": ((), False),
    "int8 (plain, ffn_out float)": ((r"\.ffn_out$",), False),
    "int8 (plain, layers 0-3 float)": ((r"^layers\.[0-3]\.",), False),
}


def texts(count: int) -> list[str]:
    """``count`` real docstrings of at least four words (one-word ones say little)."""
    return [t for t in stdlib_docstrings() if len(t.split()) >= 4][:count]


def encoders() -> dict[str, SentenceEncoder]:
    """all-MiniLM-L6-v2 in every configuration compared, by label."""
    base = SentenceEncoder.load()
    out = {"float32": base, "bfloat16": base.with_precision("bfloat16")}
    for label, (keep, smooth) in INT8.items():
        out[label] = base.with_precision("int8", keep, smooth)
    return out


def text_table(rounds_: int, count: int, single: int) -> str:
    """Speed (batch 32 and batch 1) and cosine to float32 of every encoder configuration."""
    models = encoders()
    corpus = texts(count)
    ids = models["float32"].tokenize(corpus, truncate=True)
    ones = ids[:single]
    reference = models["float32"].embed(ids, max_batch_size=BATCH)
    quality = {}
    for name, enc in models.items():
        cos = F.cosine_similarity(enc.embed(ids, max_batch_size=BATCH), reference, dim=-1)
        quality[name] = (float(cos.min()), float(cos.mean()))
    head = (
        f"{len(ids)} texts, {sum(map(len, ids)) / len(ids):.0f} tokens on average "
        f"({min(map(len, ids))}-{max(map(len, ids))}); batch 1 over the first {len(ones)}; "
        f"{rounds_} rounds, configurations in rotation within each round."
    )
    batch32 = alternating(
        {n: partial(e.embed, ids, max_batch_size=BATCH) for n, e in models.items()}, rounds_
    )
    batch1 = alternating(
        {n: partial(e.embed, ones, max_batch_size=1) for n, e in models.items()}, rounds_
    )

    def rates(times: Timed, n: int) -> tuple[float, float]:
        return n / statistics.median(times.wall), n / min(times.wall)

    base32, base1 = rates(batch32["float32"], len(ids)), rates(batch1["float32"], len(ones))
    cells = []
    for name in models:
        r32, r1 = rates(batch32[name], len(ids)), rates(batch1[name], len(ones))
        lo, mean = quality[name]
        cells.append(
            [name, f"{lo:.5f}", f"{mean:.5f}", f"{r32[0]:.0f} / {r32[1]:.0f}",
             f"{r32[0] / base32[0]:.2f} / {r32[1] / base32[1]:.2f}", f"{r1[0]:.0f} / {r1[1]:.0f}",
             f"{r1[0] / base1[0]:.2f} / {r1[1] / base1[1]:.2f}"]
        )  # fmt: skip
    columns = [
        "precision", "min cos", "mean cos", "batch 32 texts/s (median / best)",
        "x float32 (median / best)", "batch 1 texts/s (median / best)", "x float32 (median / best)",
    ]  # fmt: skip
    return head + "\n\n" + table(columns, cells)


def forecast_table(stride_long: int, names: list[str] | None, limit: int | None = None) -> str:
    """Test MSE per shipped forecaster in float32, bfloat16 and int8 (at most ``limit`` windows)."""
    from torch.utils.data import DataLoader, Subset

    from models.informer import InformerForecaster
    from models.informer.checkpoint import shipped_dirs
    from models.training.data.ett import WindowDataset
    from models.training.data.source import source_of
    from models.training.evaluate.metrics import evaluate_loader

    cells = []
    for name in names or list(shipped_dirs()):
        f = InformerForecaster.load(name)
        cfg = f.model.config
        _, splits, _ = source_of(f.meta).load(cfg.seq_len)
        test = WindowDataset(splits["test"], cfg.seq_len, cfg.label_len, cfg.pred_len)
        stride = stride_long if cfg.seq_len > 512 else 1
        scored = test if stride == 1 else Subset(test, range(0, len(test), stride))
        if limit is not None:
            scored = Subset(scored, range(min(limit, len(scored))))
        loader = DataLoader(scored, batch_size=64)
        backend = f.default_attention
        with torch.inference_mode():
            mse32, _ = evaluate_loader(f.model, loader, backend)
            mse16, _ = evaluate_loader(f.with_precision("bfloat16").model, loader, backend)
            mse8, _ = evaluate_loader(f.with_precision("int8").model, loader, backend)
        cells.append(
            [name, backend, len(scored), f"{mse32:.6f}", f"{mse16:.6f}",
             f"{mse16 / mse32 - 1:+.3%}", f"{mse8:.6f}", f"{mse8 / mse32 - 1:+.3%}"]
        )  # fmt: skip
        print(" | ".join(map(str, cells[-1])), flush=True)
    columns = [
        "model", "backend", "windows", "float32 test MSE", "bfloat16 test MSE", "change",
        "int8 test MSE", "change",
    ]  # fmt: skip
    return table(columns, cells)


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.rounds(5), cli.threads(2))
    p.add_argument("--texts", type=int, default=128, help="texts timed at batch 32")
    p.add_argument("--single", type=int, default=64, help="texts timed at batch 1")
    p.add_argument("--stride", type=int, default=16, help="ETTm1 c2048: every k-th window")
    p.add_argument("--forecasters", nargs="*", default=None, help="default: all shipped")
    p.add_argument("--max-windows", type=int, default=None, help="per forecaster (default: all)")
    p.add_argument("--skip-forecasts", action="store_true")
    p.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = cli.parse(
        p, argv, rounds=1, texts=8, single=2, forecasters=["informer-etth1-h24"], max_windows=64
    )
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.text.precision", argv)
    facts = (
        f"{args.threads} threads, native bfloat16: {native_bf16()}, int8 engine {int8_engine()}, "
        f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', '-')}. The machine is shared with "
        "other work: configurations alternate within each round, and both the median and the "
        "best round are given."
    )
    print(facts, flush=True)
    text = text_table(args.rounds, args.texts, args.single)
    print(text, flush=True)
    forecasts = (
        ""
        if args.skip_forecasts
        else forecast_table(args.stride, args.forecasters, args.max_windows)
    )
    if args.write or args.smoke:
        report.add(facts, "## all-MiniLM-L6-v2, in-process, flash", text)
        report.add("## Informer forecasters, bfloat16 against float32", forecasts)
        report.write(OUT, "Precision per request: speed and quality on CPU")


if __name__ == "__main__":
    main()
