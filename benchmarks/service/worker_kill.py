"""One worker of ``--workers 2`` SIGKILLed under 32 keep-alive clients: what it costs, and when
the replacement serves again.

    python -m benchmarks.service.worker_kill                 # 20 s before the kill, 100 s after
    python -m benchmarks.service.worker_kill --clients 32 --after 120

``attnserve serve --workers 2`` (all-MiniLM-L6-v2) under closed-loop clients, one keep-alive
connection each; one worker killed after ``--before`` seconds, the load kept on ``--after`` more.
The ``x-request-id`` prefix tells which process answered. Writes
``benchmarks/results/worker-kill-cpu.{md,json}``. ``--smoke``: 4 clients, 2 s before, 4 s after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import cli
from benchmarks.harness.process import TEXT_MODEL, ServerProcess, attnserve
from benchmarks.harness.report import RESULTS, write

TEXTS = ["worker replacement under keep-alive load", "a second, somewhat longer sentence here"]


async def client(
    url: str, stop: asyncio.Event, log: list[tuple[float, str | None, int]], last: dict
) -> None:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        while not stop.is_set():
            try:
                r = await c.post("/encode", json={"inputs": TEXTS})
                prefix = r.headers.get("x-request-id", "").rsplit("-", 1)[0] or None
                status = r.status_code
            except httpx.HTTPError:
                prefix, status = None, 0
            log.append((time.monotonic(), prefix, status))
            if status == 200:
                last[id(c)] = prefix


async def run(args: argparse.Namespace, server: ServerProcess) -> dict[str, Any]:
    stop = asyncio.Event()
    log: list[tuple[float, str | None, int]] = []
    last: dict[int, str | None] = {}
    started = time.monotonic()
    tasks = [asyncio.create_task(client(server.url, stop, log, last)) for _ in range(args.clients)]
    await asyncio.sleep(args.before)
    prefixes_before = Counter(p for t, p, s in log if s == 200 and t > started + args.before - 10)
    victim = server.children(lambda command: "spawn_main" in command)[0]
    snapshot = dict(last)  # which process each client last heard from
    # The victim's prefix is the one that stops answering after the kill.
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    await asyncio.sleep(args.after)
    stop.set()
    await asyncio.gather(*tasks)
    after = [(t, p, s) for t, p, s in log if t >= killed_at]
    answering_after = {p for t, p, s in after if s == 200 and p and t > killed_at + 2}
    victim_prefix = next((p for p in prefixes_before if p not in answering_after), None)
    in_flight = sum(1 for p in snapshot.values() if p == victim_prefix)
    failed = [(t, s) for t, p, s in after if s != 200]
    new_prefixes = sorted(str(p) for p in answering_after - set(prefixes_before))
    first_new = min((t for t, p, s in after if p in new_prefixes and s == 200), default=None)
    windows = []
    for start in range(0, int(args.after), 10):
        lo, hi = killed_at + start, killed_at + start + 10
        seen = Counter(p for t, p, s in after if lo <= t < hi and s == 200)
        total = sum(seen.values())
        windows.append(
            {
                "from_s": start,
                "answers": total,
                "replacement_share": (sum(seen[p] for p in new_prefixes) / total if total else 0.0),
                "failed": sum(1 for t, p, s in after if lo <= t < hi and s != 200),
            }
        )
    return {
        "clients": args.clients,
        "victim_pid": victim,
        "in_flight_on_victim": in_flight,
        "failed_requests": len(failed),
        "failed_statuses": dict(Counter(s for _, s in failed)),
        "replacement_first_answer_s": None if first_new is None else first_new - killed_at,
        "windows": windows,
        "max_connection_age_s": args.max_connection_age_s,
    }


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--before", type=float, default=20.0)
    p.add_argument("--after", type=float, default=100.0)
    p.add_argument("--max-connection-age-s", type=float, default=60.0)
    args = cli.parse(p, argv, clients=4, before=2.0, after=4.0)
    log_path = Path(tempfile.gettempdir()) / "worker-kill-server.log"
    # Two workers, the other settings the defaults (a max queue of 1,024 is never reached here).
    age = ["--max-connection-age-s", str(args.max_connection_age_s)]
    server = attnserve([TEXT_MODEL], 0, 32, log_path, workers=2, extra=age)
    try:
        server.wait_ready()
        time.sleep(5)  # the second worker finishes its warm-up
        result = asyncio.run(run(args, server))
    finally:
        server.stop()
    lines = [
        "# One of two workers SIGKILLed under keep-alive load (CPU)",
        "",
        f"`python -m benchmarks.service.worker_kill --clients {args.clients}`; "
        f"max_connection_age_s {args.max_connection_age_s:g}.",
        "",
        f"- requests in flight on the killed worker: {result['in_flight_on_victim']}",
        f"- failed requests: {result['failed_requests']} {result['failed_statuses']}",
        "- replacement's first answer: "
        + (
            "never"
            if result["replacement_first_answer_s"] is None
            else f"{result['replacement_first_answer_s']:.1f} s after the kill"
        ),
        "",
        "| seconds after kill | answers | from the replacement | failed |",
        "|---|---:|---:|---:|",
        *(
            f"| {w['from_s']}-{w['from_s'] + 10} | {w['answers']} | "
            f"{w['replacement_share']:.0%} | {w['failed']} |"
            for w in result["windows"]
        ),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    write(RESULTS / "worker-kill-cpu.md", text)
    write(RESULTS / "worker-kill-cpu.json", json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
