"""One host, four ways to run the server, the same load: one process, ``--workers 2`` (our own
supervisor) and Ray Serve with 1 and 2 replicas (``--ray --replicas N``).

    .venv/bin/python -m benchmarks.scale_out [--clients 32] [--seconds 15]

Each variant serves all-MiniLM-L6-v2 and informer-etth1-h24 with one torch thread per process
(replica); per workload (``/encode`` one short text per request under ``flash``; ``/forecast``
one ETTh1 window per request under the model's default) ``--clients`` closed-loop clients run
for ``--seconds`` after a warm-up. Prints throughput and p50/p99 latency with the ratio to
``--workers 2``, and writes ``benchmarks/results/scale-out-cpu.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from benchmarks.service import (
    TEXT_MODEL,
    LoadResult,
    ServerProcess,
    drive,
    encode_workload,
    etth1_windows,
    forecast_workload,
    short_texts,
)

RESULTS = Path(__file__).parent / "results"
FORECAST_MODEL = "informer-etth1-h24"
VARIANTS: dict[str, tuple[int, list[str]]] = {  # name: (workers, extra flags)
    "one process": (1, []),
    "--workers 2": (2, []),
    "Ray Serve, 1 replica": (1, ["--ray", "--replicas", "1"]),
    "Ray Serve, 2 replicas": (1, ["--ray", "--replicas", "2"]),
}


def measure(variant: str, clients: int, seconds: float, log_dir: Path) -> list[dict[str, Any]]:
    workers, extra = VARIANTS[variant]
    server = ServerProcess(
        [TEXT_MODEL, FORECAST_MODEL],
        1,
        32,
        log_dir / f"scale-out-{variant.replace(' ', '_').replace(',', '')}.log",
        workers=workers,
        extra=extra,
    )
    workloads = {
        "encode": encode_workload(short_texts(256), "flash"),
        "forecast": forecast_workload(FORECAST_MODEL, etth1_windows(96, 256), "probsparse"),
    }
    rows = []
    try:
        server.wait_ready(timeout=600)
        for task, work in workloads.items():
            result: LoadResult = asyncio.run(drive(server.url, work, clients, seconds, 3.0))
            rows.append(
                {
                    "variant": variant,
                    "task": task,
                    "requests_per_s": result.throughput,
                    "p50_ms": result.pct(50),
                    "p99_ms": result.pct(99),
                    "errors": result.errors,
                }
            )
            r = rows[-1]
            print(
                f"{variant:22s} {task:8s} {r['requests_per_s']:7.1f} req/s  p50 {r['p50_ms']:7.1f}"
                f"  p99 {r['p99_ms']:7.1f} ms  errors {r['errors']}",
                flush=True,
            )
    finally:
        server.stop()
    return rows


def table(rows: list[dict[str, Any]], clients: int) -> str:
    lines = [
        f"| task | server | req/s @{clients} clients | p50 ms | p99 ms | errors | "
        "throughput vs --workers 2 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for task in dict.fromkeys(r["task"] for r in rows):
        group = [r for r in rows if r["task"] == task]
        ref = next((r for r in group if r["variant"] == "--workers 2"), None)
        for r in group:
            ratio = r["requests_per_s"] / ref["requests_per_s"] if ref else float("nan")
            name = f"*{r['variant']}* (reference)" if r is ref else r["variant"]
            lines.append(
                f"| {task} | {name} | {r['requests_per_s']:.1f} | {r['p50_ms']:.0f} | "
                f"{r['p99_ms']:.0f} | {r['errors']} | {ratio:.2f}x |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--out", type=Path, default=RESULTS / "scale-out-cpu")
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for variant in args.variants:
        rows += measure(variant, args.clients, args.seconds, args.log_dir)
    text = (
        f"`python -m benchmarks.scale_out --clients {args.clients} --seconds {args.seconds:g}`: "
        "one host, all-MiniLM-L6-v2 and informer-etth1-h24, one torch thread per process or "
        "replica, clients on the same machine; each variant started, driven and stopped in "
        "turn.\n\n" + table(rows, args.clients) + "\n"
    )
    print(text)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
