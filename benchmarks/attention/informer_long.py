"""Informer forward pass at long contexts, per attention backend: latency and peak memory as the
context grows, or (``--memory``) the batcher's activation-memory estimate against measured peaks.

    python -m benchmarks.attention.informer_long                       # L = 96 … 8192, batch 1, 1 thread
    python -m benchmarks.attention.informer_long --memory              # preset long, L 2048, horizon 96

Every point runs in a fresh subprocess on one thread, fp32, inference mode, with random weights
(speed and memory do not depend on the values) unless ``--checkpoint`` names one.

Against length (default): one forward pass (batch 1) of the per-step Informer (``small`` preset;
one token per step, so the attention sees all L steps) with the encoder context set to L and the
decoder at 48 + 24 steps. Peak memory is ``ru_maxrss`` after the first forward minus the RSS
just before it; latency is the median of the timed repeats after one warm-up (as many as fill
about a second for fast points, one for points over 2 s). Writes
``benchmarks/results/informer_long.{md,json,png}``.

``--memory`` (against batch): the estimate the batcher uses (:mod:`models.informer.memory` over
the layer plan), the torch allocator's peak during one forward pass (:mod:`models.profiling`:
what the estimate models), and the resident-set high-water mark above the RSS before the pass,
after a one-row warm-up (what ``attnserve_batch_activation_memory_measured_bytes`` reads on CPU).
Random init matches a trained checkpoint of the same config. Writes
``benchmarks/results/memory-cpu.{md,json}``.

``--smoke``: L = 96, flash and probsparse, one repeat; with ``--memory``, the ``small`` preset
(context 96), flash at batch 1.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from benchmarks.attention.common import (
    full_fits,
    in_subprocess,
    informer_inputs,
    length_plot,
    peak_rss_mib,
    rss_mib,
)
from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.report import table as md_table
from benchmarks.harness.timing import median_ms
from models.names import BACKEND_NAMES

BACKENDS = list(BACKEND_NAMES)  # every backend, in the registry's order
LENGTHS = [96, 192, 384, 768, 1536, 3072, 6144, 8192]
MIB = 2**20


def length_worker(backend: str, length: int, repeats: int) -> dict[str, Any]:
    """Runs in the subprocess: one (backend, L) measured."""
    from models.informer.config import preset
    from models.informer.model import Informer, attention_plan

    torch.manual_seed(0)
    model = Informer(preset("small", seq_len=length)).eval()  # random init, batch 1
    inputs = informer_inputs(model.config, 1)
    with torch.inference_mode():
        base = rss_mib()
        t0 = time.perf_counter()
        model(*inputs, backend=backend)
        first = time.perf_counter() - t0
        peak = peak_rss_mib() - base
        # Fast points: enough repeats to fill about a second (noise at small L); slow points:
        # one timed repeat after the warm-up.
        n = min(max(repeats, int(1.0 / max(first, 1e-3))), 50) if first < 2.0 else 1
        ms = median_ms(lambda: model(*inputs, backend=backend), n, warmup=0)
    plan = attention_plan(model.config, backend, None, length)
    return {
        "backend": backend,
        "L": length,
        "median_ms": ms,
        "peak_mib": peak,
        "weights": "random init (small preset)",
        "layers": {k: v.backend for k, v in plan.items()},
    }


def _memory_model(checkpoint: str | None, smoke: bool) -> tuple[Any, str]:
    """The checkpoint's network, or the ``long`` preset (context 2048; ``smoke``: the ``small``
    preset at 96) at random init; and what it is."""
    from models.informer.config import preset
    from models.informer.model import Informer

    if checkpoint:
        from models.informer import InformerForecaster

        return InformerForecaster.load(checkpoint).model.eval(), checkpoint
    torch.manual_seed(0)
    if smoke:
        return Informer(preset("small", seq_len=96)).eval(), "preset small, random init"
    return Informer(preset("long", seq_len=2048, pred_len=96)).eval(), "preset long, random init"


def memory_worker(backend: str, batch: int, checkpoint: str | None, smoke: bool) -> dict[str, Any]:
    """Runs in the subprocess: one (backend, batch) estimated and measured."""
    from models.informer.memory import forward_bytes
    from models.informer.model import attention_plan
    from models.profiling import allocated_peak
    from service.engine.batching.device import proc_status_bytes, reset_rss_peak

    model, source = _memory_model(checkpoint, smoke)
    c = model.config
    inputs = informer_inputs(c, batch)
    with torch.inference_mode():
        model(*(t[:1] for t in inputs), backend=backend)  # warm-up, as the server does
        base = reset_rss_peak()
        model(*inputs, backend=backend)
        high = proc_status_bytes("VmHWM")
        _, allocated = allocated_peak(lambda: model(*inputs, backend=backend))
    plan = attention_plan(c, backend)
    return {
        "backend": backend,
        "batch": batch,
        "context": c.seq_len,
        "estimate_mib": forward_bytes(c, plan, batch) / MIB,
        "allocated_mib": allocated / MIB,
        "rss_mib": None if base is None or high is None else (high - base) / MIB,
        "model": source,
    }


def crossovers(rows: list[dict], ref: str = "full") -> dict[str, int | None]:
    """Smallest L from which each backend is faster than ``ref`` at every measured L ≥ it."""
    full = {r["L"]: r["median_ms"] for r in rows if r["backend"] == ref and "median_ms" in r}
    out: dict[str, int | None] = {}
    for b in {r["backend"] for r in rows} - {ref}:
        mine = {r["L"]: r["median_ms"] for r in rows if r["backend"] == b and "median_ms" in r}
        common = sorted(set(mine) & set(full))
        faster = [mine[n] < full[n] for n in common]
        out[b] = next((n for i, n in enumerate(common) if all(faster[i:])), None)
    return out


def length_table(rows: list[dict]) -> str:
    """Latency and memory per backend (columns) and length (rows), then the crossovers."""
    lengths = sorted({r["L"] for r in rows})
    backends = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    cell = {(r["backend"], r["L"]): r for r in rows}

    def fmt(r: dict | None, key: str, digits: int) -> str:
        if r is None:
            return "–"
        if key not in r:
            return r.get("error", "–")
        return f"{r[key]:.{digits}f}"

    columns = ["L", *(f"{b} ms" for b in backends), *(f"{b} MiB" for b in backends)]
    cells = [
        [n, *(fmt(cell.get((b, n)), "median_ms", 1) for b in backends)]
        + [fmt(cell.get((b, n)), "peak_mib", 0) for b in backends]
        for n in lengths
    ]
    lines = [md_table(columns, cells), ""]
    for ref in ("full", "flash"):
        cross = crossovers(rows, ref)
        found = ", ".join(f"{b}: {cross[b] or 'never (in range)'}" for b in backends if b in cross)
        lines.append(f"Faster than `{ref}` at every L from: {found}  ")
    return "\n".join(lines)


def memory_cells(r: dict) -> list[object]:
    """One ``--memory`` row's table cells."""
    if "error" in r:
        return [r["backend"], r["batch"], r["error"], "", "", ""]
    rss = "–" if r["rss_mib"] is None else f"{r['rss_mib']:.1f}"
    return [
        r["backend"], r["batch"], f"{r['estimate_mib']:.1f}", f"{r['allocated_mib']:.1f}",
        f"{r['estimate_mib'] / r['allocated_mib']:.2f}", rss,
    ]  # fmt: skip


def write_length(args: argparse.Namespace, report: Report, rows: list[dict]) -> None:
    """The latency and memory against length: table, crossovers, plot."""
    report.add(
        "CPU, 1 torch thread; other work on the machine inflates latencies.", length_table(rows)
    )
    report.write(args.out, "Informer forward vs context length", data=rows)
    title = "Informer (shipped h24 architecture), batch 1, fp32, CPU, 1 thread"
    labels = ("encoder context L (steps)", "forward latency (ms)", "peak extra memory (MiB)")
    length_plot(args.out.with_suffix(".png"), rows, "backend", BACKENDS, labels, title)


def write_memory(args: argparse.Namespace, report: Report, rows: list[dict]) -> None:
    """The estimate against the allocator's and the RSS peaks, per (backend, batch)."""
    report.table(
        ["backend", "batch", "estimate MiB", "allocator peak MiB", "estimate / allocator",
         "RSS high-water MiB"],
        map(memory_cells, rows),
    )  # fmt: skip
    report.add(f"CPU, float32, inference mode, 1 thread. Model: {rows[0].get('model')}.")
    report.write(args.out, "Activation memory: estimate vs measured", data=rows)


def worker_args(args: argparse.Namespace) -> list[str]:
    """What each subprocess is told besides its (backend, size)."""
    if not args.memory:
        return ["--repeats", str(args.repeats)]
    extra = ["--memory", *(["--smoke"] if args.smoke else [])]
    return [*extra, *(["--checkpoint", args.checkpoint] if args.checkpoint else [])]


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.sizes("--lengths", LENGTHS),
        cli.sizes("--batches", [1, 32], "with --memory: batch sizes"),
        cli.names("--backends", [], f"default {BACKENDS}"),
        cli.repeats(3),
        cli.out(None, "default: informer_long.md (with --memory: memory-cpu.md) in results/"),
    )
    p.add_argument("--memory", action="store_true", help="activation memory: estimate vs measured")
    p.add_argument("--checkpoint", help="with --memory: an Informer checkpoint (default: random)")
    p.add_argument("--timeout", type=int, help="seconds per point (default 300; --memory 600)")
    p.add_argument(
        "--full-budget-gib",
        type=float,
        default=6.0,
        help="skip full attention where its score matrices would exceed this",
    )
    p.add_argument("--worker", nargs=2, metavar=("BACKEND", "SIZE"), help=argparse.SUPPRESS)
    args = cli.parse(
        p, argv, lengths=[96], batches=[1], backends=["flash", "probsparse"], repeats=1
    )
    if args.smoke and args.memory:
        args.backends = ["flash"]
    if args.worker:
        torch.set_num_threads(1)
        backend, size = args.worker[0], int(args.worker[1])
        if args.memory:
            print(json.dumps(memory_worker(backend, size, args.checkpoint, args.smoke)))
        else:
            print(json.dumps(length_worker(backend, size, args.repeats)))
        return
    args.backends = args.backends or BACKENDS
    args.out = args.out or RESULTS / ("memory-cpu.md" if args.memory else "informer_long.md")
    timeout = args.timeout or (600 if args.memory else 300)
    report = Report("benchmarks.attention.informer_long", argv)
    rows = []
    for size in args.batches if args.memory else args.lengths:
        for b in args.backends:
            point = {"backend": b, "batch" if args.memory else "L": size}
            if not args.memory and b == "full" and not full_fits(size, 8, args.full_budget_gib):
                rows.append({**point, "error": "skipped (memory)"})
                continue
            argv_ = [b, str(size), *worker_args(args)]
            rows.append({**point, **in_subprocess(__spec__.name, argv_, timeout)})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "layers"}), flush=True)
    (write_memory if args.memory else write_length)(args, report, rows)


if __name__ == "__main__":
    main()
