"""The GPU check's attention step: every backend at the FlashAttention-2 paper's shapes on CUDA,
in fp16 and bf16, causal and not, beside the published FlashAttention-2 figures.

    python -m benchmarks.gpu_check.kernels --result attention.json [--seconds 150] [--dry]

Rows run most important first (flash with forward+backward, then ``full``, then the
approximations), each measured by :func:`benchmarks.attention.gpu.kernel_row`, and the result file
is rewritten after every row: a step stopped at its limit still reports what it measured. Rows
the time left cannot hold say ``skipped: step time limit``. Without CUDA (or with ``--dry``)
every row is ``skipped: no CUDA``, in the same shape.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.attention.gpu import kernel_row
from benchmarks.gpu_check.published import LENGTHS, SOURCES, fa2_shape, published
from benchmarks.gpu_check.report import save_result
from models.attention.registry import names

DTYPES = ("bfloat16", "float16")
HEAD_DIMS = (64, 128)
# The slowest row seen is well under this; a row is not started with less time left than this.
ROW_RESERVE_S = 4.0


def grid(backends: tuple[str, ...] | None = None) -> list[tuple[str, str, bool, int, int]]:
    """(backend, dtype, causal, head_dim, seq_len) in the order they run: flash first (the row
    the published figures are for), then ``full``, then the approximations (``backends``: every
    registered one by default)."""
    listed = names() if backends is None else backends
    order = sorted(listed, key=lambda b: (b != "flash", b != "full"))
    return [
        (backend, dtype, causal, d, n)
        for backend in order
        for dtype in DTYPES
        for causal in (False, True)
        for d in HEAD_DIMS
        for n in LENGTHS
    ]


def placeholder(backend: str, dtype: str, causal: bool, d: int, n: int, status: str) -> dict:
    """A row with no figures, in the shape of a measured one."""
    b, h = fa2_shape(n, d)
    return {
        "backend": backend, "dtype": dtype, "causal": causal, "head_dim": d, "seq_len": n,
        "batch": b, "heads": h, "fwd_ms": None, "fwd_tflops": None, "fwd_bwd_ms": None,
        "fwd_bwd_tflops": None, "peak_mib": None, "status": status,
        "published": published(causal, d, n) if backend == "flash" else {},
    }  # fmt: skip


def run(seconds: float, dry: bool, result: Path) -> None:
    """Measure the grid within ``seconds`` (or fill it with skipped rows) into ``result``."""
    cuda = torch.cuda.is_available() and not dry
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    cells = grid()
    rows: list[dict[str, Any]] = []
    figures = {"device": name, "rows": rows, "sources": SOURCES}
    if not cuda:
        rows += [placeholder(*cell, "skipped: no CUDA") for cell in cells]
        save_result(result, "skipped: no CUDA", figures)
        return
    deadline = time.monotonic() + seconds
    for backend, dtype, causal, d, n in cells:
        if time.monotonic() > deadline - ROW_RESERVE_S:
            rows.append(placeholder(backend, dtype, causal, d, n, "skipped: step time limit"))
            continue
        rows.append(
            kernel_row(
                backend, d, n, causal, getattr(torch, dtype), device,
                reps=3, seconds=0.1, backward=backend == "flash",
            )
        )  # fmt: skip
        save_result(result, "running", figures)
    measured = sum(r["status"] == "ok" for r in rows)
    errors = [r for r in rows if r["status"].startswith("error")]
    message = f"{measured} of {len(rows)} rows measured, {len(errors)} raised an error"
    save_result(result, "ok" if measured and not errors else "failed", figures, message)


def main(argv: list[str] | None = None) -> None:
    """Run the attention step into its result file."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=150.0, help="time for the whole grid")
    p.add_argument("--dry", action="store_true", help="no measurement: every row skipped")
    args = p.parse_args(argv)
    run(args.seconds, args.dry, args.result)


if __name__ == "__main__":
    main()
