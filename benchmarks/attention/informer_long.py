"""Informer forward pass as the context grows: latency and peak memory per attention backend.

    python -m benchmarks.attention.informer_long                       # L = 96 … 8192, batch 1, 1 thread
    python -m benchmarks.attention.informer_long --lengths 96 1024 --backends full probsparse

One forward pass (batch 1, fp32, inference mode) of the per-step Informer (``small`` preset,
random weights: speed and memory do not depend on the values; one token per step, so the
attention sees all L steps) with the encoder context set to L and the decoder at 48 + 24 steps. Every (backend, L) runs in a fresh subprocess: peak memory is ``ru_maxrss`` after
the first forward minus the RSS just before it; latency is the median of the timed repeats after
one warm-up (as many as fill about a second for fast points, one for points over 2 s).
Writes ``benchmarks/results/informer_long.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.harness.report import RESULTS

BACKENDS = ["full", "flash", "probsparse", "performer", "nystrom"]
LENGTHS = [96, 192, 384, 768, 1536, 3072, 6144, 8192]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _build(length: int):
    """The ``small`` preset at random init and a batch-1 input at L."""
    from models.informer.config import preset
    from models.informer.model import Informer

    torch.manual_seed(0)
    model = Informer(preset("small", seq_len=length)).eval()
    source = "random init (small preset)"
    c = model.config
    x = torch.randn(1, length, c.enc_in)
    xm = torch.rand(1, length, c.time_features) - 0.5
    xd = torch.cat([x[:, -c.label_len :], torch.zeros(1, c.pred_len, c.enc_in)], dim=1)
    xdm = torch.rand(1, c.dec_len, c.time_features) - 0.5
    return model, (x, xm, xd, xdm), source


def worker(backend: str, length: int, repeats: int) -> None:
    """Runs in the subprocess: prints one JSON line."""
    torch.set_num_threads(1)
    model, inputs, source = _build(length)
    with torch.inference_mode():
        base = _rss_mib()
        t0 = time.perf_counter()
        model(*inputs, backend=backend)
        first = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
        times = []
        # Fast points: enough repeats to fill about a second (noise at small L); slow points:
        # one timed repeat after the warm-up.
        n = min(max(repeats, int(1.0 / max(first, 1e-3))), 50) if first < 2.0 else 1
        for _ in range(n):
            t0 = time.perf_counter()
            model(*inputs, backend=backend)
            times.append(time.perf_counter() - t0)
    layers = {k: v.backend for k, v in _plan(model, backend, length).items()}
    print(
        json.dumps(
            {
                "backend": backend,
                "L": length,
                "median_ms": statistics.median(times) * 1e3,
                "peak_mib": peak,
                "weights": source,
                "layers": layers,
            }
        )
    )


def _plan(model, backend: str, length: int):
    from models.informer.model import attention_plan

    return attention_plan(model.config, backend, None, length)


def _full_fits(length: int, heads: int, budget_gib: float) -> bool:
    # Encoder layer 0 materialises [1, h, L, L] scores plus the softmax copy (fp32).
    return 2 * heads * length * length * 4 / 2**30 <= budget_gib


def measure(backend: str, length: int, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.attention.informer_long",
        "--worker",
        backend,
        str(length),
        "--repeats",
        str(args.repeats),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"backend": backend, "L": length, "error": f"timeout {args.timeout}s"}
    if proc.returncode != 0:
        return {"backend": backend, "L": length, "error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    lengths = sorted({r["L"] for r in rows})
    backends = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    cell = {(r["backend"], r["L"]): r for r in rows}

    def fmt(r: dict | None, key: str, digits: int) -> str:
        if r is None:
            return "–"
        if key not in r:
            return r.get("error", "–")
        return f"{r[key]:.{digits}f}"

    head = "| L | " + " | ".join(f"{b} ms" for b in backends) + " | "
    head += " | ".join(f"{b} MiB" for b in backends) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(backends))]
    for n in lengths:
        ms = [fmt(cell.get((b, n)), "median_ms", 1) for b in backends]
        mib = [fmt(cell.get((b, n)), "peak_mib", 0) for b in backends]
        lines.append(f"| {n} | " + " | ".join(ms) + " | " + " | ".join(mib) + " |")
    lines.append("")
    for ref in ("full", "flash"):
        cross = crossovers(rows, ref)
        found = ", ".join(f"{b}: {cross[b] or 'never (in range)'}" for b in backends if b in cross)
        lines.append(f"Faster than `{ref}` at every L from: {found}  ")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for backend in BACKENDS:
        pts = sorted((r["L"], r) for r in rows if r["backend"] == backend and "median_ms" in r)
        if not pts:
            continue
        xs = [n for n, _ in pts]
        a.plot(xs, [r["median_ms"] for _, r in pts], marker="o", label=backend)
        b.plot(xs, [max(r["peak_mib"], 0.1) for _, r in pts], marker="o", label=backend)
    for ax, label in ((a, "forward latency (ms)"), (b, "peak extra memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("encoder context L (steps)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Informer (shipped h24 architecture), batch 1, fp32, CPU, 1 thread")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="*", default=LENGTHS)
    p.add_argument("--backends", nargs="*", default=BACKENDS)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=300, help="seconds per (backend, L)")
    p.add_argument(
        "--full-budget-gib",
        type=float,
        default=6.0,
        help="skip full attention where its score matrices would exceed this",
    )
    p.add_argument("--replot", action="store_true", help="rewrite md/png from the saved JSON")
    p.add_argument("--worker", nargs=2, metavar=("BACKEND", "L"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.repeats)
        return
    if args.replot:
        rows = json.loads((RESULTS / "informer_long.json").read_text())
        note = (RESULTS / "informer_long.md").read_text().split("\nCPU:", 1)[1]
        _write(rows, "\nCPU:" + note)
        return
    rows = []
    for n in args.lengths:
        for b in args.backends:
            if b == "full" and not _full_fits(n, 8, args.full_budget_gib):
                rows.append({"backend": b, "L": n, "error": "skipped (memory)"})
                continue
            r = measure(b, n, args)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "layers"}), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "informer_long.json").write_text(json.dumps(rows, indent=1) + "\n")
    load = os.getloadavg()
    note = (
        f"\nCPU: {os.cpu_count()} cores, torch {torch.__version__}, 1 thread; load average "
        f"at the end {load[0]:.1f} (other work on the machine inflates latencies).\n"
    )
    _write(rows, note)


def _write(rows: list[dict], note: str) -> None:
    text = table(rows)
    (RESULTS / "informer_long.md").write_text(
        "# Informer forward vs context length\n\n" + text + "\n" + note
    )
    plot(rows, RESULTS / "informer_long.png")
    print(text + note)


if __name__ == "__main__":
    main()
