"""How long the event loop stalls while clients send large forecast bodies: ``/healthz``
latency measured beside them.

    .venv/bin/python -m benchmarks.service.loop_stall [--clients 1 4] [--seconds 15] \
        [--parse-processes 0 1]

Per ``--parse-processes`` (0: bodies parsed on the event loop; N: in N helper processes,
``service.http.body_pool``), ``attnserve serve`` with informer-etth1-h24 (one torch thread)
gets, per ``--clients`` level, bodies just under the 4 MiB limit (64 series of 360 hourly rows)
from that many closed-loop clients while one prober calls ``/healthz`` every 10 ms.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from benchmarks.harness import cli
from benchmarks.harness.load import HOST, LoadResult, build_request, drive
from benchmarks.harness.process import attnserve

MODEL = "informer-etth1-h24"


def big_body(series: int = 64, rows: int = 360) -> bytes:
    from tests.service.helpers import hourly_series

    histories = [hourly_series(rows, seed=i) for i in range(series)]
    return json.dumps({"model": MODEL, "series": histories}).encode()


async def stall(
    port: int, body: bytes, clients: int, seconds: float
) -> tuple[LoadResult, LoadResult]:
    """``clients`` senders of ``body`` to ``/forecast`` and, beside them, one prober of
    ``/healthz`` every 10 ms, for ``seconds``; (probes, forecasts)."""
    forecast = [build_request(HOST, port, "/forecast", body)]
    healthz = [build_request(HOST, port, "/healthz", method="GET")]
    return await asyncio.gather(
        drive(HOST, port, healthz, 1, seconds, 0.0, pause=0.01),
        drive(HOST, port, forecast, clients, seconds, 0.0),
    )


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.seconds(15.0))
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    p.add_argument("--parse-processes", type=int, nargs="+", default=[0, 1])
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    args = cli.parse(p, argv, seconds=1.0, clients=[1], parse_processes=[0])
    body = big_body()
    print(f"body {len(body):,} bytes")
    print("| clients | body parsing | healthz p50 ms | p99 ms | max ms | forecasts answered |")
    print("|---:|---|---:|---:|---:|---:|")
    for processes in args.parse_processes:
        where = f"{processes} helper process(es)" if processes else "on the event loop"
        extra = ["--body-parse-processes", str(processes)]
        server = attnserve([MODEL], 1, 32, args.log_dir / "loop-stall.log", extra=extra)
        try:
            server.wait_ready()
            for clients in args.clients:
                probe, sent = asyncio.run(stall(server.port, body, clients, args.seconds))
                print(
                    f"| {clients} | {where} | {probe.pct(50):.1f} | {probe.pct(99):.1f} | "
                    f"{probe.pct(100):.1f} | {sent.requests} |",
                    flush=True,
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
