"""Memory under refused requests: does a flood of cheap-to-send, costly-to-judge requests leave
the server's resident memory where it was?

    .venv/bin/python -m benchmarks.service.attacks_memory [--clients 16] [--seconds 30]

Issue 50 item 1: 16 clients sending ``POST /encode`` with one 1 MB CJK text and
``long_text: "windows"`` (each answered 422 ``compute_budget_exceeded``) took an attnserve
process from 1.5 to 7.3 GB resident, still there after 80 s idle. This drives that load against
one server process (all-MiniLM-L6-v2, one worker), samples the resident set of its whole process
tree every quarter second, keeps sampling ``--settle`` seconds after the last request, and
prints the baseline, the peak, the end and what the refusals cost. The targets: peak within
1 GB of the baseline, and back within 200 MB of it ``--settle`` seconds after the load, with no
request needed to bring it back.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.load import HOST, build_request
from benchmarks.harness.process import ServerProcess, attnserve
from benchmarks.harness.report import RESULTS, Report
from tests.utils.floods import Flood, flood

OUT = RESULTS / "attacks-memory-cpu.md"
MODEL = "all-MiniLM-L6-v2"
# The request: 350,000 characters of Japanese (about 1 MB of UTF-8), in windows.
CJK_WINDOWS = {"inputs": ["東京は日本の首都です" * 35000], "long_text": "windows"}


def rss_mb(server: ServerProcess) -> float:
    """Resident memory of the server's live processes, MB (0 once it is gone)."""
    total = 0
    for proc in server.members().values():
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def flood_memory(
    server: ServerProcess,
    body: dict[str, Any],
    clients: int,
    seconds: float,
    settle: float,
    path: str = "/encode",
    every: float = 0.25,
) -> dict[str, Any]:
    """Flood ``server`` with ``body`` on ``path`` while sampling its resident memory, then keep
    sampling ``settle`` seconds with no request. Returns MB figures and the answers' statuses
    and median latency."""
    request = build_request(HOST, server.port, path, json.dumps(body).encode())
    samples: list[tuple[float, float]] = []
    start = time.perf_counter()
    baseline = rss_mb(server)
    result: dict[str, Flood] = {}
    thread = threading.Thread(
        target=lambda: result.setdefault(
            "flood", asyncio.run(flood(server.port, request, clients, seconds))
        )
    )
    thread.start()
    while thread.is_alive():
        samples.append((time.perf_counter() - start, rss_mb(server)))
        time.sleep(every)
    thread.join()
    load_end = time.perf_counter()
    at_end = rss_mb(server)
    while time.perf_counter() - load_end < settle:
        samples.append((time.perf_counter() - start, rss_mb(server)))
        time.sleep(every)
    after = rss_mb(server)
    seen = result["flood"]
    return {
        "clients": clients,
        "seconds": seconds,
        "settle_s": settle,
        "baseline_mb": round(baseline, 1),
        "peak_mb": round(max(m for _, m in samples), 1),
        "end_of_load_mb": round(at_end, 1),
        "after_settle_mb": round(after, 1),
        "answers": dict(seen.statuses),
        "dropped": seen.dropped,
        "median_ms": round(statistics.median(seen.latencies_ms), 1) if seen.latencies_ms else None,
        "samples": [(round(t, 2), round(m, 1)) for t, m in samples],
    }


def row(label: str, seen: dict[str, Any]) -> list[object]:
    """One table row of :func:`flood_memory`'s figures."""
    base = seen["baseline_mb"]
    return [
        label,
        seen["clients"],
        f"{seen['seconds']:g}",
        f"{base:.0f}",
        f"{seen['peak_mb']:.0f} (+{seen['peak_mb'] - base:.0f})",
        f"{seen['after_settle_mb']:.0f} ({seen['after_settle_mb'] - base:+.0f})",
        ", ".join(f"{n}× {s}" for s, n in sorted(seen["answers"].items())),
        seen["median_ms"],
    ]


COLUMNS = [
    "flood",
    "clients",
    "s",
    "baseline MB",
    "peak MB",
    "after settle MB",
    "answers",
    "median ms",
]


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.seconds(30.0, "seconds of flood"),
        cli.out(OUT),
    )
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--settle", type=float, default=30.0, help="idle seconds sampled after")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--log", type=Path, default=Path("/tmp/attacks-memory.log"))
    args = cli.parse(p, argv, seconds=2.0, clients=2, settle=1.0)
    report = Report("benchmarks.service.attacks_memory", argv)
    load = load_average()
    server = attnserve([MODEL], threads=0, max_batch_size=32, log=args.log, workers=args.workers)
    try:
        server.wait_ready()
        rows, data = [], {}
        for label, path, body in (
            ("encode, CJK 1 MB, windows", "/encode", CJK_WINDOWS),
            ("tokenize, CJK 1 MB", "/tokenize", {"inputs": CJK_WINDOWS["inputs"]}),
        ):
            seen = flood_memory(server, body, args.clients, args.seconds, args.settle, path)
            print(label, {k: v for k, v in seen.items() if k != "samples"}, flush=True)
            rows.append(row(label, seen))
            data[label] = seen
    finally:
        server.stop()
    report.add(f"CPU: {cpu_model()}; load average before: {load}; workers: {args.workers}")
    report.table(COLUMNS, rows)
    report.write(args.out, "Memory under refused requests", data)


if __name__ == "__main__":
    main()
