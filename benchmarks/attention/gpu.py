"""Attention on a GPU: flash TFLOP/s beside FlashAttention-2's published figures, every backend's
latency and memory, padded batches.

    python -m benchmarks.attention.gpu                      # the issue's grid, on CUDA
    python -m benchmarks.attention.gpu --lengths 1024 4096 --head-dims 64
    python -m benchmarks.attention.gpu --smoke             # L = 128, a few seconds, CPU or CUDA

Three tables, written to ``benchmarks/results/attention-gpu.md`` (and ``.json``):

1. **flash throughput** at the FlashAttention-2 paper's shapes (Dao 2023, Sec. 4.1: 16k tokens
   as batch x L, hidden 2048 as heads x D), with and without a causal mask: forward and
   forward+backward time and TFLOP/s, FLOPs counted as the paper counts them
   (:func:`benchmarks.gpu_check.published.forward_flops`; backward 2.5x forward), beside the
   published FlashAttention-2 figures (:mod:`benchmarks.gpu_check.published`, labelled as such).
2. **every backend**, B=1, H=16, D=64: forward latency and peak memory above the inputs
   (``max_memory_allocated``); ``full`` is skipped where its score matrix alone would pass
   ``--full-budget-gib``.
3. **padded batches**: 32 rows with lengths uniform in [L/8, L], flash with ``padding='mask'``
   (memory-efficient kernel + key mask) against ``padding='jagged'`` (variable-length flash
   kernel on the real tokens only).

Times are medians over repetitions after warm-up, the device synchronised around each. Runs on
CPU too (small ``--lengths``, jagged skipped) to check the script itself; the figures that matter
need CUDA. ``python -m benchmarks.gpu_check`` runs the same rows (:func:`kernel_row`) inside the
GPU check's time budget.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.gpu_check.published import (
    LENGTHS,
    SOURCES,
    TOKENS,
    fa2_shape,
    forward_flops,
    published,
)
from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report, table
from benchmarks.harness.timing import budget_samples
from models.attention import BACKENDS, AttentionError, attend


def timed_ms(fn: Callable[[], Any], device: torch.device, reps: int, seconds: float) -> float:
    """Median milliseconds of ``fn`` over at least ``reps`` runs (more while ``seconds`` last; one
    run slower than ``seconds`` is the measurement), after two warm-up runs; on CUDA the clock
    is read with the device synchronised."""
    fn()
    fn()
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    return statistics.median(budget_samples(fn, seconds, reps, sync=sync)) * 1e3


def peak_mib(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Peak memory allocated by ``fn`` above what was allocated before (CUDA only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def qkv(
    b: int, h: int, n: int, d: int, dtype: torch.dtype, device: torch.device, grad: bool
) -> list[torch.Tensor]:
    """Seeded random q, k, v of shape [b, h, n, d]."""
    g = torch.Generator(device=device).manual_seed(0)
    return [
        (torch.randn(b, h, n, d, generator=g, device=device, dtype=dtype) * 0.5).requires_grad_(
            grad
        )
        for _ in range(3)
    ]


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def kernel_row(
    backend: str,
    head_dim: int,
    seq_len: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
    reps: int = 3,
    seconds: float = 0.2,
    backward: bool = False,
    full_budget_gib: float = 24.0,
    tokens: int = TOKENS,
) -> dict[str, Any]:
    """One backend at one FlashAttention-2 paper shape (:func:`fa2_shape`): forward time, TFLOP/s
    (for an approximation, the exact count over its time: an effective rate) and peak memory;
    with ``backward``, forward+backward too. ``status`` says why a row has no figures: the
    backend refused the input (its reason), the device ran out of memory, ``full``'s score
    matrix alone would pass ``full_budget_gib``, or the backend raised (``error: ...``). ``tokens``: batch x length, the paper's 16k
    unless a smoke run asks for less."""
    b, h = fa2_shape(seq_len, head_dim, tokens)
    flops = forward_flops(b, h, seq_len, head_dim, causal)
    row: dict[str, Any] = {
        "backend": backend, "dtype": str(dtype).removeprefix("torch."), "causal": causal,
        "head_dim": head_dim, "seq_len": seq_len, "batch": b, "heads": h,
        "fwd_ms": None, "fwd_tflops": None, "fwd_bwd_ms": None, "fwd_bwd_tflops": None,
        "peak_mib": None, "status": "ok",
        "published": published(causal, head_dim, seq_len) if backend == "flash" else {},
    }  # fmt: skip
    scores = b * h * seq_len * seq_len * torch.finfo(dtype).bits // 8 * 3
    if backend == "full" and scores > full_budget_gib * 2**30:
        row["status"] = f"skipped: scores over {full_budget_gib:g} GiB"
        return row
    tensors: list[torch.Tensor] = []
    try:
        tensors += qkv(b, h, seq_len, head_dim, dtype, device, grad=backward)

        def forward() -> torch.Tensor:
            q, k, v = tensors
            with torch.no_grad():
                return attend(q, k, v, backend=backend, causal=causal)

        def forward_backward() -> None:
            q, k, v = tensors
            attend(q, k, v, backend=backend, causal=causal).sum().backward()

        fwd = timed_ms(forward, device, reps, seconds)
        row.update(fwd_ms=fwd, fwd_tflops=flops / fwd / 1e9, peak_mib=peak_mib(forward, device))
        if backward:
            both = timed_ms(forward_backward, device, reps, seconds)
            row.update(fwd_bwd_ms=both, fwd_bwd_tflops=3.5 * flops / both / 1e9)
    except AttentionError as exc:
        row["status"] = f"refused: {exc}"
    except torch.OutOfMemoryError:
        row["status"] = "OOM"
    except Exception as exc:  # a backend's bug on this device is a finding, not the end of the grid
        row["status"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        tensors.clear()  # the inputs go before the next row allocates its own
        _free(device)
    return row


def flash_throughput(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """Table 1: flash forward and forward+backward at the paper's shapes, causal and not."""
    rows = []
    for causal in (False, True):
        for d in args.head_dims:
            for n in args.fa2_lengths:
                rows.append(
                    kernel_row(
                        "flash", d, n, causal, args.dtype, device, args.reps, args.seconds,
                        backward=True, tokens=args.tokens,
                    )
                )  # fmt: skip
                print(rows[-1], flush=True)
    return rows


def every_backend(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """Table 2: every backend's forward latency and peak memory."""
    rows = []
    elem = torch.finfo(args.dtype).bits // 8
    for n in args.lengths:
        q, k, v = qkv(1, 16, n, 64, args.dtype, device, grad=False)
        row: dict[str, Any] = {"L": n}
        for backend in BACKENDS:
            if backend == "full" and 16 * n * n * elem * 3 > args.full_budget_gib * 2**30:
                row[backend] = None  # skipped: the score matrix alone passes the budget
                continue

            def run(backend: str = backend, q=q, k=k, v=v) -> torch.Tensor:
                with torch.inference_mode():
                    return attend(q, k, v, backend=backend)

            try:
                row[backend] = {
                    "ms": timed_ms(run, device, args.reps, args.seconds),
                    "peak_mib": peak_mib(run, device),
                }
            except torch.OutOfMemoryError:
                row[backend] = {"ms": None, "peak_mib": None, "oom": True}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        rows.append(row)
        print(row, flush=True)
    return rows


def padded_batches(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """Table 3: flash on padded batches, key mask against the jagged kernel (CUDA only)."""
    if device.type != "cuda":
        return []  # the jagged path is CUDA-only
    rows = []
    g = torch.Generator().manual_seed(0)
    for n in args.padded_lengths:
        lengths = torch.randint(max(1, n // 8), n + 1, (32,), generator=g).to(device)
        lengths[0] = n  # the batch pads to L
        mask = torch.arange(n, device=device)[None, :] < lengths[:, None]
        q, k, v = qkv(32, 12, n, 64, args.dtype, device, grad=False)
        row: dict[str, Any] = {"L": n, "real_fraction": float(mask.float().mean())}
        for padding in ("mask", "jagged"):

            def run(padding: str = padding, q=q, k=k, v=v, mask=mask) -> torch.Tensor:
                with torch.inference_mode():
                    return attend(q, k, v, backend="flash", key_padding_mask=mask, padding=padding)

            row[padding] = {
                "ms": timed_ms(run, device, args.reps, args.seconds),
                "peak_mib": peak_mib(run, device),
            }
        row["jagged_speedup"] = row["mask"]["ms"] / row["jagged"]["ms"]
        rows.append(row)
        print(row, flush=True)
    return rows


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(
    report: Report, device: str, args: argparse.Namespace, results: dict[str, Any]
) -> None:
    """The three tables into ``report``."""
    report.add(
        f"dtype {str(args.dtype).removeprefix('torch.')}; device {device}; medians of synchronised "
        "timings. The published columns are FlashAttention-2's own figures, not measured here: "
        + "; ".join(f"{k}: {v}" for k, v in SOURCES.items()) + ".",
        "## flash at the FlashAttention-2 paper's shapes (16k tokens, hidden 2048)",
        table(
            ["causal", "D", "L", "B×H", "fwd ms", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd TFLOP/s",
             "published H100 fwd", "published H100 fwd+bwd", "status"],
            [
                [r["causal"], r["head_dim"], r["seq_len"], f"{r['batch']}×{r['heads']}",
                 _fmt(r["fwd_ms"], ".3f"), _fmt(r["fwd_tflops"], ".1f"),
                 _fmt(r["fwd_bwd_ms"], ".3f"), _fmt(r["fwd_bwd_tflops"], ".1f"),
                 _fmt(r["published"]["fa2_h100_fwd"], ".0f"),
                 _fmt(r["published"]["fa2_h100_fwd_bwd"], ".0f"), r["status"]]
                for r in results["flash"]
            ],
            "lrrrrrrrrrl",
        ),
        "## every backend, B=1, H=16, D=64 (forward ms / peak MiB)",
    )  # fmt: skip

    def cell(c: dict[str, Any] | None) -> str:
        if c is None:
            return "skipped"
        if c.get("oom"):
            return "OOM"
        return f"{_fmt(c['ms'], '.2f')} / {_fmt(c['peak_mib'], '.0f')}"

    report.table(
        ["L", *BACKENDS],
        [[r["L"], *(cell(r.get(b)) for b in BACKENDS)] for r in results["backends"]],
        "r" * (1 + len(BACKENDS)),
    )
    if results["padded"]:
        report.add("## padded batches: 32 rows, lengths uniform in [L/8, L], H=12, D=64")
        report.table(
            ["L", "real tokens", "mask ms / MiB", "jagged ms / MiB", "jagged speed-up"],
            [
                [r["L"], f"{r['real_fraction']:.0%}",
                 f"{r['mask']['ms']:.2f} / {r['mask']['peak_mib']:.0f}",
                 f"{r['jagged']['ms']:.2f} / {r['jagged']['peak_mib']:.0f}",
                 f"{r['jagged_speedup']:.2f}x"]
                for r in results["padded"]
            ],
            "rrrrr",
        )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.sizes("--fa2-lengths", list(LENGTHS), "table 1's sequence lengths"),
        cli.sizes("--lengths", [1024, 2048, 4096, 8192, 16384, 32768, 65536], "table 2's"),
        cli.sizes("--head-dims", [64, 128]),
        cli.sizes("--padded-lengths", [512, 2048, 8192]),
        cli.seconds(1.0),
        cli.out(RESULTS / "attention-gpu"),
    )
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tokens", type=int, default=TOKENS, help="table 1: batch x length")
    p.add_argument("--full-budget-gib", type=float, default=24.0)
    smoke = {
        "fa2_lengths": [128], "lengths": [128], "head_dims": [64], "padded_lengths": [128],
        "reps": 1, "tokens": 128,
    }  # fmt: skip
    args = cli.parse(p, argv, **smoke, seconds=0.01)
    args.dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    report = Report("benchmarks.attention.gpu", argv)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results = {
        "device": name,
        "torch": torch.__version__,
        "flash": flash_throughput(args, device),
        "backends": every_backend(args, device),
        "padded": padded_batches(args, device),
    }
    markdown(report, name, args, results)
    report.write(args.out.with_suffix(".md"), f"Attention on {name}", data=results)


if __name__ == "__main__":
    main()
