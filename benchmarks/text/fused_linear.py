"""Eager linear layers against oneDNN's fused ones, per row count (``models/text/network/fused_linear.py``).

    .venv/bin/python -m benchmarks.text.fused_linear [--threads 1 2] [--out benchmarks/results/fused-linear-cpu.md]

For MiniLM's three layer shapes (384->1152 QKV, 384->1536 + GELU, 1536->384 + residual add) and
row counts from one token to a long batch, the microseconds per call of the eager expression
(``F.linear`` / ``gelu(F.linear)`` / ``x.add_(b).addmm_``) and of the fused op, and their ratio.
The row count at which the fused op starts to win sets ``fused_linear.MIN_ROWS``. ``--smoke``:
1 thread, 16 and 64 rows.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.harness import cli
from benchmarks.harness.report import Report

ROWS = [1, 2, 4, 8, 16, 32, 64, 256, 1024]
fused = torch.ops.mkldnn._linear_pointwise


def per_call_us(fn: Callable[[], object], rows: int) -> float:
    """Best of three timings of ``fn`` (microseconds per call)."""
    calls = max(30, 20_000 // rows)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(5):
            fn()
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def shapes(rows: int) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """(eager, fused) callables for each layer kind at ``rows`` rows."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    x, h, r = rand(rows, 384), rand(rows, 1536), rand(rows, 384)
    w_qkv, b_qkv = rand(1152, 384), rand(1152)
    w_in, b_in = rand(1536, 384), rand(1536)
    w_out, b_out = rand(384, 1536), rand(384)
    return {
        "qkv 384->1152": (
            lambda: F.linear(x, w_qkv, b_qkv),
            lambda: fused(x, w_qkv, b_qkv, "none", [], ""),
        ),
        "ffn in 384->1536 + gelu": (
            lambda: F.gelu(F.linear(x, w_in, b_in)),
            lambda: fused(x, w_in, b_in, "gelu", [], "none"),
        ),
        "ffn out 1536->384 + residual": (
            lambda: r.clone().add_(b_out).addmm_(h, w_out.t()),
            lambda: fused.binary(h, r.clone(), w_out, b_out, "add"),
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__, cli.sizes("--threads", [1, 2]), cli.out(None, "write the tables as Markdown")
    )
    parser.add_argument("--rows", type=int, nargs="+", default=ROWS, help=argparse.SUPPRESS)
    args = cli.parse(parser, argv, threads=[1], rows=[16, 64])
    report = Report("benchmarks.text.fused_linear", argv)
    report.add("Microseconds per call, eager / fused (ratio = eager / fused).")
    for threads in args.threads:
        torch.set_num_threads(threads)
        cells: dict[str, list[str]] = {}
        for rows in args.rows:
            for name, (eager, one_op) in shapes(rows).items():
                e, f = per_call_us(eager, rows), per_call_us(one_op, rows)
                cells.setdefault(name, [name]).append(f"{e:.0f} / {f:.0f} ({e / f:.2f}x)")
        report.add(f"## {threads} torch thread(s)")
        report.table(
            ["layer", *(f"{n} rows" for n in args.rows)], cells.values(), "l" + "r" * len(args.rows)
        )
    title = "Eager vs fused (oneDNN) linear layers, per row count"
    report.write(args.out, title)


if __name__ == "__main__":
    main()
