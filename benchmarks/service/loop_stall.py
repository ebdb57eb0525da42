"""How long the event loop stalls while clients send large forecast bodies: ``/healthz``
latency measured beside them.

    .venv/bin/python -m benchmarks.loop_stall [--clients 1 4] [--seconds 15] [--parse-processes 0 1]

Per ``--parse-processes`` (0: bodies parsed on the event loop; N: in N helper processes,
``service.http.body_pool``), starts ``attnserve serve`` with informer-etth1-h24 (one torch thread),
then, per ``--clients`` level, that many closed-loop clients each send a body just under the
4 MiB limit (64 series of 360 hourly rows) while one prober calls ``/healthz`` every 10 ms.
Prints the prober's p50, p99 and worst latency and the forecasts answered: a stalled loop shows
in ``/healthz``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.service import ServerProcess

MODEL = "informer-etth1-h24"


def big_body(series: int = 64, rows: int = 360) -> bytes:
    from tests.service.helpers import hourly_series

    histories = [hourly_series(rows, seed=i) for i in range(series)]
    return json.dumps({"model": MODEL, "series": histories}).encode()


async def drive(url: str, body: bytes, clients: int, seconds: float) -> tuple[list[float], int]:
    stop = time.monotonic() + seconds

    async def sender(c: httpx.AsyncClient) -> int:
        sent = 0
        while time.monotonic() < stop:
            r = await c.post(
                "/forecast", content=body, headers={"content-type": "application/json"}
            )
            r.raise_for_status()
            sent += 1
        return sent

    async def prober(c: httpx.AsyncClient) -> list[float]:
        latencies = []
        while time.monotonic() < stop:
            started = time.perf_counter()
            (await c.get("/healthz")).raise_for_status()
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.01)
        return latencies

    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        probe, *sent = await asyncio.gather(prober(c), *(sender(c) for _ in range(clients)))
    return sorted(probe), sum(sent)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--parse-processes", type=int, nargs="+", default=[0, 1])
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    args = p.parse_args(argv)
    body = big_body()
    print(f"body {len(body):,} bytes")
    print("| clients | body parsing | healthz p50 ms | p99 ms | max ms | forecasts answered |")
    print("|---:|---|---:|---:|---:|---:|")
    for processes in args.parse_processes:
        where = f"{processes} helper process(es)" if processes else "on the event loop"
        extra = ["--body-parse-processes", str(processes)]
        server = ServerProcess([MODEL], 1, 32, args.log_dir / "loop-stall.log", extra=extra)
        try:
            server.wait_ready()
            for clients in args.clients:
                probe, sent = asyncio.run(drive(server.url, body, clients, args.seconds))
                p99 = probe[min(len(probe) - 1, int(0.99 * len(probe)))]
                print(
                    f"| {clients} | {where} | {statistics.median(probe):.1f} | {p99:.1f} | "
                    f"{probe[-1]:.1f} | {sent} |",
                    flush=True,
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
