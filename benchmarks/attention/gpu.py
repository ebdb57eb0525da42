"""Attention on a GPU: flash TFLOP/s, every backend's latency and memory, padded batches.

    python -m benchmarks.attention.gpu                      # the issue's grid, on CUDA
    python -m benchmarks.attention.gpu --lengths 1024 4096 --head-dims 64 --quick

Three tables, written to ``benchmarks/results/attention-gpu.md`` (and ``.json``):

1. **flash throughput**, B=1, H=16, bf16, D in ``--head-dims``, L in ``--lengths``: forward and
   forward+backward time and TFLOP/s. FLOPs are counted as in the FlashAttention-2 paper (Dao,
   2023, Sec. 4.1): forward ``4·B·H·L²·D`` (two matmuls, non-causal), backward 2.5x forward.
2. **every backend**, B=1, H=16, D=64, bf16: forward latency and peak memory above the inputs
   (``max_memory_allocated``); ``full`` is skipped where its score matrix alone would pass
   ``--full-budget-gib``.
3. **padded batches**: 32 rows with lengths uniform in [L/8, L], flash with ``padding='mask'``
   (memory-efficient kernel + key mask) against ``padding='jagged'`` (variable-length flash
   kernel on the real tokens only).

Times are medians over repetitions timed with CUDA events after warm-up. Runs on CPU too (small
``--lengths``, jagged skipped) to check the script itself; the figures that matter need CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.report import RESULTS
from models.attention import BACKENDS, attend

FA2_H100_FWD_BWD_TFLOPS = "215-340"  # FlashAttention-2 on H100 (Dao 2023 / FA3 paper baselines)


def timed_ms(fn: Callable[[], Any], device: torch.device, reps: int, seconds: float) -> float:
    """Median milliseconds of ``fn`` over at least ``reps`` runs (or ``seconds``), after warm-up."""
    fn()
    fn()
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(samples) < reps or (time.perf_counter() < deadline and len(samples) < 50):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


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


def qkv(b: int, h: int, n: int, d: int, dtype: torch.dtype, device: torch.device, grad: bool):
    g = torch.Generator(device=device).manual_seed(0)
    return [
        (torch.randn(b, h, n, d, generator=g, device=device, dtype=dtype) * 0.5).requires_grad_(
            grad
        )
        for _ in range(3)
    ]


def flash_throughput(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    rows = []
    for d in args.head_dims:
        for n in args.lengths:
            q, k, v = qkv(1, 16, n, d, args.dtype, device, grad=True)
            flops = 4 * 16 * n * n * d

            def forward(q=q, k=k, v=v) -> torch.Tensor:  # type: ignore[no-untyped-def]
                with torch.no_grad():
                    return attend(q, k, v, backend="flash")

            def forward_backward(q=q, k=k, v=v) -> None:  # type: ignore[no-untyped-def]
                attend(q, k, v, backend="flash").sum().backward()

            fwd = timed_ms(forward, device, args.reps, args.seconds)
            both = timed_ms(forward_backward, device, args.reps, args.seconds)
            rows.append(
                {
                    "head_dim": d,
                    "L": n,
                    "fwd_ms": fwd,
                    "fwd_tflops": flops / fwd / 1e9,
                    "fwd_bwd_ms": both,
                    "fwd_bwd_tflops": 3.5 * flops / both / 1e9,
                }
            )
            print(rows[-1], flush=True)
            del q, k, v
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def every_backend(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    rows = []
    elem = torch.finfo(args.dtype).bits // 8
    for n in args.lengths:
        q, k, v = qkv(1, 16, n, 64, args.dtype, device, grad=False)
        row: dict[str, Any] = {"L": n}
        for backend in BACKENDS:
            if backend == "full" and 16 * n * n * elem * 3 > args.full_budget_gib * 2**30:
                row[backend] = None  # skipped: the score matrix alone passes the budget
                continue

            def run(backend: str = backend, q=q, k=k, v=v) -> torch.Tensor:  # type: ignore[no-untyped-def]
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

            def run(padding: str = padding, q=q, k=k, v=v, mask=mask) -> torch.Tensor:  # type: ignore[no-untyped-def]
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


def markdown(device: str, args: argparse.Namespace, results: dict[str, Any]) -> str:
    out = [
        f"# Attention on {device}",
        "",
        f"dtype {str(args.dtype).removeprefix('torch.')}; medians of CUDA-event timings. "
        f"FlashAttention-2 on H100 reaches about {FA2_H100_FWD_BWD_TFLOPS} TFLOP/s "
        "forward+backward.",
        "",
        "## flash, B=1, H=16",
        "",
        "| D | L | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["flash"]:
        out.append(
            f"| {r['head_dim']} | {r['L']} | {r['fwd_ms']:.3f} | {r['fwd_tflops']:.1f} | "
            f"{r['fwd_bwd_ms']:.3f} | {r['fwd_bwd_tflops']:.1f} |"
        )
    out += ["", "## every backend, B=1, H=16, D=64 (forward ms / peak MiB)", ""]
    out.append("| L | " + " | ".join(BACKENDS) + " |")
    out.append("|---:|" + "---:|" * len(BACKENDS))
    for r in results["backends"]:
        cells = []
        for b in BACKENDS:
            cell = r.get(b)
            if cell is None:
                cells.append("skipped")
            elif cell.get("oom"):
                cells.append("OOM")
            else:
                cells.append(f"{_fmt(cell['ms'], '.2f')} / {_fmt(cell['peak_mib'], '.0f')}")
        out.append(f"| {r['L']} | " + " | ".join(cells) + " |")
    if results["padded"]:
        out += [
            "",
            "## padded batches: 32 rows, lengths uniform in [L/8, L], H=12, D=64",
            "",
            "| L | real tokens | mask ms / MiB | jagged ms / MiB | jagged speed-up |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in results["padded"]:
            m, j = r["mask"], r["jagged"]
            out.append(
                f"| {r['L']} | {r['real_fraction']:.0%} | {m['ms']:.2f} / {m['peak_mib']:.0f} | "
                f"{j['ms']:.2f} / {j['peak_mib']:.0f} | {r['jagged_speedup']:.2f}x |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768, 65536]
    )
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--padded-lengths", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="time budget per measurement")
    p.add_argument("--full-budget-gib", type=float, default=24.0)
    p.add_argument("--out", type=Path, default=RESULTS / "attention-gpu")
    args = p.parse_args()
    args.dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results = {
        "device": name,
        "torch": torch.__version__,
        "flash": flash_throughput(args, device),
        "backends": every_backend(args, device),
        "padded": padded_batches(args, device),
    }
    text = markdown(name, args, results)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
