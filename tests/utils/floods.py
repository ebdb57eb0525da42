"""Closed-loop floods of one request that count every answer, refusals included (the load driver
of ``benchmarks.harness.load`` counts only 2xx answers as served): what the hostile-request tests
and ``benchmarks/service/attacks_memory.py`` send."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from benchmarks.harness.load import HOST, read_response


@dataclass
class Flood:
    """What a flood saw: answers by status, their latencies (ms), dropped connections."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    dropped: int = 0


async def flood(port: int, request: bytes, clients: int, seconds: float) -> Flood:
    """``clients`` keep-alive clients sending ``request`` (complete HTTP/1.1 bytes) back to back
    for ``seconds`` to ``HOST:port``; a dropped connection is counted and reopened."""
    seen = Flood()
    stop_at = time.perf_counter() + seconds

    async def client() -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        try:
            while time.perf_counter() < stop_at:
                sent = time.perf_counter()
                try:
                    if reader is None or writer is None:
                        reader, writer = await asyncio.open_connection(HOST, port)
                    writer.write(request)
                    head, _ = await read_response(reader)
                except (OSError, EOFError, ValueError):
                    seen.dropped += 1
                    if writer is not None:
                        writer.close()
                    reader = writer = None
                    await asyncio.sleep(0.05)
                    continue
                seen.statuses[head.status] += 1
                seen.latencies_ms.append((time.perf_counter() - sent) * 1000)
                if head.close:
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return seen
