"""One host, four ways to run the server, the same load: one process, ``--workers 2`` (our own
supervisor) and Ray Serve with 1 and 2 replicas (``--ray --replicas N``).

    .venv/bin/python -m benchmarks.service.scale_out [--clients 32] [--seconds 15]

Each serves all-MiniLM-L6-v2 and informer-etth1-h24, one torch thread per process (replica),
under ``--clients`` closed-loop clients per workload (``/encode`` under ``flash``, ``/forecast``
under probsparse); ``--workers 2`` is the reference. Writes
``benchmarks/results/scale-out-cpu.{md,json}``. ``--smoke``: one process, a second per workload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.process import TEXT_MODEL, attnserve
from benchmarks.harness.report import RESULTS, write
from benchmarks.service.common import drive_each
from benchmarks.service.workloads import etth1_windows, short_texts, workload

FORECAST_MODEL = "informer-etth1-h24"
VARIANTS: dict[str, tuple[int, list[str]]] = {  # name: (workers, extra flags)
    "one process": (1, []),
    "--workers 2": (2, []),
    "Ray Serve, 1 replica": (1, ["--ray", "--replicas", "1"]),
    "Ray Serve, 2 replicas": (1, ["--ray", "--replicas", "2"]),
}


def measure(variant: str, clients: int, seconds: float, log_dir: Path) -> list[dict[str, Any]]:
    """Start ``variant``, drive each workload with ``clients`` clients, stop it; one row each."""
    workers, extra = VARIANTS[variant]
    server = attnserve(
        [TEXT_MODEL, FORECAST_MODEL],
        1,
        32,
        log_dir / f"scale-out-{variant.replace(' ', '_').replace(',', '')}.log",
        workers=workers,
        extra=extra,
    )
    workloads = {
        "encode": workload("/encode", short_texts(256), "flash"),
        "forecast": workload(
            "/forecast", etth1_windows(96, 256), "probsparse", model=FORECAST_MODEL
        ),
    }
    results = drive_each(server, workloads, clients, seconds, min(3.0, seconds), variant, 600)
    return [
        {
            "variant": variant,
            "task": task,
            "requests_per_s": result.throughput,
            "p50_ms": result.pct(50),
            "p99_ms": result.pct(99),
            "errors": result.error_count,
        }
        for task, result in results.items()
    ]


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
    p = cli.parser(__doc__, cli.seconds(15.0), cli.out(RESULTS / "scale-out-cpu"))
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    args = cli.parse(p, argv, seconds=1.0, clients=4, variants=["one process"])
    rows: list[dict[str, Any]] = []
    for variant in args.variants:
        rows += measure(variant, args.clients, args.seconds, args.log_dir)
    text = (
        f"`python -m benchmarks.service.scale_out --clients {args.clients} "
        f"--seconds {args.seconds:g}`: "
        "one host, all-MiniLM-L6-v2 and informer-etth1-h24, one torch thread per process or "
        "replica, clients on the same machine; each variant started, driven and stopped in "
        "turn.\n\n" + table(rows, args.clients) + "\n"
    )
    print(text)
    write(args.out.with_suffix(".md"), text)
    write(args.out.with_suffix(".json"), json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
