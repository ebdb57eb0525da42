"""Memory a flood of refused requests used comes back (issue 50 item 1), at a smaller scale
than ``benchmarks/service/attacks_memory.py`` (16 clients, 30 s, 30 s of settling).

Each request is one 1 MB Japanese text in windows, over the windows' compute budget: a 422,
never a batch. Before the fix the server's resident memory grew by gigabytes under such a flood
and stayed there, since nothing but a batch ever returned freed memory to the kernel.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from types import SimpleNamespace

import psutil
import pytest

from benchmarks.harness.load import HOST, build_request
from service.http.memory_trim import TrimAfterLargeBodies
from tests.service.server_process import ServerProcess
from tests.utils.floods import flood

CJK_WINDOWS = {"inputs": ["東京は日本の首都です" * 35000], "long_text": "windows"}


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("memory") / "server.log"
    process = ServerProcess(log, ["all-MiniLM-L6-v2"], ["--memory-trim-interval-s", "1"])
    with process.serving():
        yield process


def test_refused_floods_leave_resident_memory_where_it_was(server: ServerProcess) -> None:
    pid = server.proc.pid
    request = build_request(HOST, server.port, "/encode", json.dumps(CJK_WINDOWS).encode())
    asyncio.run(flood(server.port, request, clients=1, seconds=0.5))  # first-use allocations
    time.sleep(2.0)
    baseline = rss_mb(pid)
    peak = baseline
    for _ in range(3):
        seen = asyncio.run(flood(server.port, request, clients=6, seconds=2.0))
        peak = max(peak, rss_mb(pid))
        assert set(seen.statuses) == {422}, seen.statuses
    deadline = time.monotonic() + 6.0  # a few trim intervals, and no request meanwhile
    after = rss_mb(pid)
    while after > baseline + 100 and time.monotonic() < deadline:
        time.sleep(0.25)
        after = rss_mb(pid)
    assert peak < baseline + 1024, (baseline, peak)
    assert after <= baseline + 100, (baseline, peak, after)


@pytest.mark.parametrize(
    ("method", "headers", "trims"),
    [
        ("POST", [(b"content-length", b"1048576")], 1),  # large: answered or refused alike
        ("POST", [(b"transfer-encoding", b"chunked")], 1),  # size unknown
        ("POST", [(b"content-length", b"300")], 0),
        ("GET", [], 0),
    ],
)
def test_a_large_request_arms_a_trim_whatever_its_answer(
    method: str, headers: list[tuple[bytes, bytes]], trims: int
) -> None:
    calls: list[None] = []
    state = SimpleNamespace(runtime=SimpleNamespace(trim_later=lambda: calls.append(None)))

    async def refusing_app(scope: dict, receive: object, send: object) -> None:
        raise ValueError("the app failed")  # the trim is armed all the same

    middleware = TrimAfterLargeBodies(refusing_app, state)  # type: ignore[arg-type]
    scope = {"type": "http", "method": method, "headers": headers}
    with pytest.raises(ValueError):
        asyncio.run(middleware(scope, None, None))  # type: ignore[arg-type]
    assert len(calls) == trims
