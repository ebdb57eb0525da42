"""Informer forward pass as the context grows: latency and peak memory per attention backend.

    python -m benchmarks.attention.informer_long                       # L = 96 … 8192, batch 1, 1 thread
    python -m benchmarks.attention.informer_long --lengths 96 1024 --backends full probsparse

One forward pass (batch 1, fp32, inference mode) of the per-step Informer (``small`` preset,
random weights: speed and memory do not depend on the values; one token per step, so the
attention sees all L steps) with the encoder context set to L and the decoder at 48 + 24 steps. Every (backend, L) runs in a fresh subprocess: peak memory is ``ru_maxrss`` after
the first forward minus the RSS just before it; latency is the median of the timed repeats after
one warm-up (as many as fill about a second for fast points, one for points over 2 s).
Writes ``benchmarks/results/informer_long.{md,json,png}``. ``--smoke``: L = 96, flash and
probsparse, one repeat.
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

BACKENDS = ["full", "flash", "probsparse", "performer", "nystrom"]
LENGTHS = [96, 192, 384, 768, 1536, 3072, 6144, 8192]


def worker(backend: str, length: int, repeats: int) -> dict[str, Any]:
    """Runs in the subprocess: one (backend, L) measured."""
    from models.informer.config import preset
    from models.informer.model import Informer, attention_plan

    torch.set_num_threads(1)
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


def table(rows: list[dict]) -> str:
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


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.sizes("--lengths", LENGTHS),
        cli.names("--backends", BACKENDS),
        cli.repeats(3),
        cli.out(RESULTS / "informer_long.md"),
    )
    p.add_argument("--timeout", type=int, default=300, help="seconds per (backend, L)")
    p.add_argument(
        "--full-budget-gib",
        type=float,
        default=6.0,
        help="skip full attention where its score matrices would exceed this",
    )
    p.add_argument("--worker", nargs=2, metavar=("BACKEND", "L"), help=argparse.SUPPRESS)
    args = cli.parse(p, argv, lengths=[96], backends=["flash", "probsparse"], repeats=1)
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.repeats)))
        return
    report = Report("benchmarks.attention.informer_long", argv)
    rows = []
    for n in args.lengths:
        for b in args.backends:
            if b == "full" and not full_fits(n, 8, args.full_budget_gib):
                rows.append({"backend": b, "L": n, "error": "skipped (memory)"})
                continue
            argv_ = [b, str(n), "--repeats", str(args.repeats)]
            rows.append({"backend": b, "L": n, **in_subprocess(__spec__.name, argv_, args.timeout)})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "layers"}), flush=True)
    report.add("CPU, 1 torch thread; other work on the machine inflates latencies.", table(rows))
    report.write(args.out, "Informer forward vs context length", data=rows)
    title = "Informer (shipped h24 architecture), batch 1, fp32, CPU, 1 thread"
    labels = ("encoder context L (steps)", "forward latency (ms)", "peak extra memory (MiB)")
    length_plot(args.out.with_suffix(".png"), rows, "backend", BACKENDS, labels, title)


if __name__ == "__main__":
    main()
