"""End to end: the real server (``python -m service serve``) in a subprocess on a free port, with
the real all-MiniLM-L6-v2 and a tiny Informer checkpoint, talked to over HTTP. The last test sends
SIGTERM during a burst and checks that no accepted request is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.conftest import metric
from tests.service.helpers import hourly_series, tiny_checkpoint
from tests.service.server_process import (
    ROOT,
    ServerProcess,
    long_text_burst,
    wait_until_admitted,
)
from tests.utils.live_server import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TEXT = "all-MiniLM-L6-v2"
MAX_BATCH = 4


class Server(ServerProcess):
    """The real text model and a tiny Informer, small batches so queues form."""

    def __init__(self, tmp: Path) -> None:
        self.ckpt = tiny_checkpoint(tmp / "informer-tiny-e2e")
        args = ["--max-batch-size", str(MAX_BATCH), "--max-wait-ms", "2"]
        super().__init__(
            tmp / "server.log", [TEXT, str(self.ckpt)], [*args, "--shutdown-grace-s", "60"]
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("e2e"))
    with s.serving():
        yield s


def test_health_models_and_both_tasks_over_http(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").json()["status"] == "ready"
        names = {card["name"] for card in c.get("/models").json()["data"]}
        assert names == {TEXT, "informer-tiny-e2e"}
        r = c.post("/encode", json={"inputs": ["hello world"], "attention": "flash"})
        assert r.status_code == 200, r.text
        assert len(r.json()["embeddings"][0]) == 384
        for header in ("x-request-id", "x-queue-time-ms", "x-inference-time-ms", "x-batch-size"):
            assert header in r.headers
        r = c.post(
            "/v1/embeddings", json={"input": "hello world", "model": TEXT, "attention": "full"}
        )
        assert r.status_code == 200 and r.json()["data"][0]["object"] == "embedding"
        r = c.post("/forecast", json={"model": "informer-tiny-e2e", "series": [hourly_series(30)]})
        assert r.status_code == 200, r.text
        assert len(r.json()["forecasts"][0]["values"]) == 8
        r = c.post("/encode", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request"
        assert "attnserve_requests_total" in c.get("/metrics").text


def test_missing_weights_fail_start_up_with_exit_status_1(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "service", "serve", "--port", str(free_port())]
    args += ["--models", "informer-etth1-h999", "--device", "cpu", "--workers", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "no Informer checkpoint 'informer-etth1-h999'" in done.stderr


async def _burst(url: str, n: int) -> list[asyncio.Task[httpx.Response]]:
    client = httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=n))
    return long_text_burst(client, n)


async def _queue_depth(client: httpx.AsyncClient) -> float:
    return metric((await client.get("/metrics")).text, "attnserve_queue_depth_requests", model=TEXT)


async def _wait_for_depth(client: httpx.AsyncClient, depth: int, tasks: list[Any]) -> None:
    deadline = time.monotonic() + 30
    while await _queue_depth(client) < depth:
        failed = [t.result() for t in tasks if t.done() and t.result().status_code != 200]
        assert not failed, failed[0].text
        assert time.monotonic() < deadline, "the burst never queued"
        await asyncio.sleep(0.01)


def test_a_client_that_leaves_is_dropped(server: Server) -> None:
    async def scenario() -> float:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            before = metric(
                (await c.get("/metrics")).text,
                "attnserve_rejections_total",
                reason="client_disconnected",
            )
            tasks = await _burst(server.url, 40)
            await _wait_for_depth(c, 4, tasks)  # the worker is busy and requests are waiting
            body = b'{"inputs": ["I will not wait"]}'
            _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                b"POST /encode HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()  # hang up while queued
            responses = await asyncio.gather(*tasks)
            assert all(r.status_code == 200 for r in responses)
            after = metric(
                (await c.get("/metrics")).text,
                "attnserve_rejections_total",
                reason="client_disconnected",
            )
            return after - before

    assert asyncio.run(scenario()) == 1


def test_sigterm_during_a_burst_loses_no_accepted_request(server: Server) -> None:
    n = 40

    async def scenario() -> tuple[list[int], float, int, int, Any]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            done_before = metric(
                (await c.get("/metrics")).text, "attnserve_requests_total", endpoint="/encode"
            )
            tasks = await _burst(server.url, n)
            in_flight = await wait_until_admitted(c, n, done_before)
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.05)
            ready = await c.get("/readyz")  # still listening while draining
            late = await c.post("/encode", json={"inputs": ["arrived after SIGTERM"]})
            responses = await asyncio.gather(*tasks)
            statuses = [r.status_code for r in responses]
            return statuses, in_flight, ready.status_code, late.status_code, late

    statuses, in_flight, ready, late_status, late = asyncio.run(scenario())
    assert in_flight > MAX_BATCH  # SIGTERM arrived with queued requests, not after the burst
    assert statuses == [200] * n
    assert ready == 503
    assert late_status == 503 and late.json()["error"]["type"] == "shutting_down"
    assert server.proc.wait(60) == 0
    log = server.log_path.read_text()
    assert "drained: every admitted request was answered" in log
