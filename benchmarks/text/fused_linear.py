"""Eager linear layers against oneDNN's fused ones, per row count (``models/text/fused_linear.py``).

    .venv/bin/python -m benchmarks.text.fused_linear [--threads 1 2] [--out benchmarks/results/fused-linear-cpu.md]

For MiniLM's three layer shapes (384->1152 QKV, 384->1536 + GELU, 1536->384 + residual add) and
row counts from one token to a long batch, the microseconds per call of the eager expression
(``F.linear`` / ``gelu(F.linear)`` / ``x.add_(b).addmm_``) and of the fused op, and their ratio.
The row count at which the fused op starts to win sets ``fused_linear.MIN_ROWS``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.host import cpu_model

ROWS = (1, 2, 4, 8, 16, 32, 64, 256, 1024)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=None, help="write the tables as Markdown")
    args = parser.parse_args(argv)
    lines = [
        "# Eager vs fused (oneDNN) linear layers, per row count",
        "",
        "`.venv/bin/python -m benchmarks.text.fused_linear --threads "
        + " ".join(str(t) for t in args.threads)
        + "`",
        "",
        f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, {platform.python_version()}; "
        "microseconds per call, eager / fused (ratio = eager / fused).",
    ]
    for threads in args.threads:
        torch.set_num_threads(threads)
        lines += ["", f"## {threads} torch thread(s)", ""]
        lines.append("| layer | " + " | ".join(f"{n} rows" for n in ROWS) + " |")
        lines.append("|---|" + "---:|" * len(ROWS))
        table: dict[str, list[str]] = {}
        for rows in ROWS:
            for name, (eager, one_op) in shapes(rows).items():
                e, f = per_call_us(eager, rows), per_call_us(one_op, rows)
                table.setdefault(name, []).append(f"{e:.0f} / {f:.0f} ({e / f:.2f}x)")
        for name, cells in table.items():
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
