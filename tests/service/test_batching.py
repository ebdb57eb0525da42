"""The batcher through HTTP: concurrent requests share a batch; OOM splits; full queues, timeouts
and departed clients are handled; the event loop keeps answering during a long batch."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from fastapi.testclient import TestClient

from tests.service.conftest import metric
from tests.service.helpers import (
    TINY_FORECAST,
    TINY_TEXT,
    Wrapped,
    hourly_series,
    make_app,
    oom_over,
    post_behind_a_running_batch,
    wait_until,
)

# max_wait for the tests where nobody may pay it: the settings' longest, so a request that paid
# it cannot pass for one that did not, even on a busy machine (the bound is half of it).
LONG_WAIT_S = 10.0


def test_a_lone_request_runs_at_once_and_arrivals_meanwhile_share_the_next_batch(
    text_double: Wrapped,
) -> None:
    # max_wait is long: the first request must not pay it (it finds the worker idle), and the
    # five that arrive while it runs must run together as soon as they fill a batch.
    app = make_app([text_double], max_batch_size=5, max_wait_ms=LONG_WAIT_S * 1000)
    with TestClient(app) as c:
        worker = c.app.state.attnserve.batcher.workers[TINY_TEXT]  # type: ignore[attr-defined]
        text_double.recording = True
        text_double.gate = threading.Event()  # holds the first batch until the rest queued
        bodies = [{"inputs": [f"text number {i}"]} for i in range(6)]
        with ThreadPoolExecutor(6) as pool:
            first = pool.submit(c.post, "/encode", json=bodies[0])
            # Running, not waiting out max_wait: its batch started while it was alone.
            wait_until(lambda: text_double.batches == [1], timeout=LONG_WAIT_S / 2)
            rest = [pool.submit(c.post, "/encode", json=b) for b in bodies[1:]]
            wait_until(lambda: worker.depth == 5)
            assert text_double.batches == [1]  # the five wait for the running batch
            text_double.gate.set()
            responses = [first.result(), *(f.result() for f in rest)]
        assert [r.status_code for r in responses] == [200] * 6
        assert responses[0].headers["x-batch-requests"] == "1"
        # Nobody waited max_wait: the lone request found the worker idle, the five filled a batch.
        for r in responses:
            assert float(r.headers["x-queue-time-ms"]) < LONG_WAIT_S / 2 * 1000
        # Five one-text requests, one forward pass of five rows.
        assert {r.headers["x-batch-requests"] for r in responses[1:]} == {"5"}
        assert {r.headers["x-batch-size"] for r in responses[1:]} == {"5"}
        assert text_double.batches == [1, 5]
        scrape = c.get("/metrics").text
        assert metric(scrape, "attnserve_batch_size_requests_count", model=TINY_TEXT) == 2
        assert metric(scrape, "attnserve_batch_size_rows_sum", model=TINY_TEXT) == 6
        # Each answer equals the same text encoded alone.
        alone = c.post("/encode", json=bodies[3]).json()["embeddings"][0]
        together = responses[3].json()["embeddings"][0]
        assert max(abs(a - b) for a, b in zip(alone, together, strict=True)) < 1e-5


def test_batch_size_header_is_the_forward_pass_for_any_max_batch_size(
    text_double: Wrapped,
) -> None:
    # One request of 40 texts: with max_batch_size 64 it is one forward pass of 40 rows (the
    # encoder does not re-split at 32); with 16 it runs in parts of 16 and says so.
    texts = [f"text {i} " * (1 + i % 7) for i in range(40)]
    for limit, parts in ((64, [40]), (16, [16, 16, 8])):
        app = make_app([text_double], max_batch_size=limit, max_inputs_per_request=64)
        with TestClient(app) as c:
            text_double.batches.clear()
            text_double.recording = True
            r = c.post("/encode", json={"inputs": texts})
            assert r.status_code == 200
            assert text_double.batches == parts
            assert r.headers["x-batch-size"] == str(parts[0])
            text_double.recording = False
            alone = c.post("/encode", json={"inputs": texts[37:38]}).json()["embeddings"][0]
            got = r.json()["embeddings"][37]
            assert max(abs(a - b) for a, b in zip(alone, got, strict=True)) < 1e-5


def test_forecasts_batch_together_and_match_alone(forecast_double: Wrapped) -> None:
    app = make_app([forecast_double], max_batch_size=4, max_wait_ms=2000)
    with TestClient(app) as c:
        forecast_double.recording = True
        bodies = [
            {"model": TINY_FORECAST, "series": [hourly_series(24 + i, seed=i)], "horizon": 3 + i}
            for i in range(4)
        ]
        _, responses = post_behind_a_running_batch(
            c, forecast_double, "/forecast", bodies[0], bodies
        )
        assert [r.status_code for r in responses] == [200] * 4
        assert {r.headers["x-batch-size"] for r in responses} == {"4"}
        assert [len(r.json()["forecasts"][0]["values"]) for r in responses] == [3, 4, 5, 6]
        alone = c.post("/forecast", json=bodies[2]).json()["forecasts"][0]["values"]
        together = responses[2].json()["forecasts"][0]["values"]
        diff = max(
            abs(a - b)
            for ra, rb in zip(alone, together, strict=True)
            for a, b in zip(ra, rb, strict=True)
        )
        assert diff < 1e-4


def test_different_backends_do_not_share_a_batch(text_double: Wrapped) -> None:
    app = make_app([text_double], max_batch_size=2, max_wait_ms=300)
    with TestClient(app) as c:
        text_double.recording = True
        bodies = [{"inputs": ["same"], "attention": b} for b in ("full", "flash", "full", "flash")]
        _, responses = post_behind_a_running_batch(c, text_double, "/encode", bodies[0], bodies)
        assert all(r.status_code == 200 for r in responses)
        assert sorted(text_double.batches) == [2, 2]
        assert [r.json()["attention"] for r in responses] == ["full", "flash", "full", "flash"]


def test_out_of_memory_splits_the_batch_and_everyone_gets_an_answer(text_double: Wrapped) -> None:
    text_double.fail = oom_over(2)
    app = make_app([text_double], max_batch_size=4, max_wait_ms=2000)
    with TestClient(app) as c:
        bodies = [{"inputs": [f"t{i}"]} for i in range(4)]
        _, responses = post_behind_a_running_batch(
            c, text_double, "/encode", {"inputs": ["x"]}, bodies
        )
        assert [r.status_code for r in responses] == [200] * 4
        assert text_double.batches == [4, 2, 2]  # tried 4, split into halves
        assert {r.headers["x-batch-size"] for r in responses} == {"2"}
        scrape = c.get("/metrics").text
        assert metric(scrape, "attnserve_batch_splits_total", model=TINY_TEXT) == 1


def test_single_request_that_cannot_fit_gets_a_clear_error_and_the_worker_lives(
    text_double: Wrapped,
) -> None:
    text_double.fail = oom_over(2)
    with TestClient(make_app([text_double])) as c:
        text_double.recording = True
        r = c.post("/encode", json={"inputs": ["a", "b", "c"]})
        assert r.status_code == 507
        assert r.json()["error"]["type"] == "out_of_memory"
        assert "fewer or shorter" in r.json()["error"]["message"]
        assert c.post("/encode", json={"inputs": ["a", "b"]}).status_code == 200
        scrape = c.get("/metrics").text
        assert metric(scrape, "attnserve_rejections_total", reason="out_of_memory") == 1


def test_full_queue_is_429_with_retry_after(text_double: Wrapped) -> None:
    text_double.gate = threading.Event()
    app = make_app([text_double], max_batch_size=1, max_queue=2, max_wait_ms=0)
    with TestClient(app) as c:
        text_double.recording = True
        worker = app.state.attnserve.batcher.workers[TINY_TEXT]
        with ThreadPoolExecutor(3) as pool:
            running = pool.submit(c.post, "/encode", json={"inputs": ["running"]})
            wait_until(lambda: text_double.batches == [1])  # the worker is busy with it
            queued = [pool.submit(c.post, "/encode", json={"inputs": [f"q{i}"]}) for i in range(2)]
            wait_until(lambda: worker.depth == 2)
            refused = c.post("/encode", json={"inputs": ["one too many"]})
            # Refused at once: answered while the worker is still held on the first batch.
            assert not running.done() and text_double.batches == [1]
            text_double.gate.set()
            assert running.result().status_code == 200
            assert [f.result().status_code for f in queued] == [200, 200]
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "queue_full"
        assert int(refused.headers["retry-after"]) >= 1
        assert text_double.batches == [1, 1, 1]  # the refused request never ran


def test_waiting_past_the_timeout_is_504(text_double: Wrapped) -> None:
    text_double.gate = threading.Event()
    app = make_app([text_double], max_batch_size=1, max_wait_ms=0, request_timeout_s=1.0)
    with TestClient(app) as c:
        text_double.recording = True
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(c.post, "/encode", json={"inputs": ["stuck"]})
            wait_until(lambda: text_double.batches == [1])
            queued = c.post("/encode", json={"inputs": ["waits behind it"]})
            text_double.gate.set()
            # Its batch was held until the request behind it had timed out: longer than 1 s.
            assert running.result().status_code == 504
        assert queued.status_code == 504
        assert queued.json()["error"]["type"] == "timeout"
        assert c.post("/encode", json={"inputs": ["after"]}).status_code == 200
        # The expired request never ran (queued before "after", it would have run first).
        assert text_double.batches == [1, 1]


def test_health_and_metrics_answer_during_a_long_batch(text_double: Wrapped) -> None:
    text_double.gate = threading.Event()
    returned = threading.Event()  # the batch's forward pass is over
    held_run = text_double.run

    def run(rows: list[Any], call: Any) -> list[Any]:
        out = held_run(rows, call)
        if text_double.recording:
            returned.set()
        return out

    text_double.run = run  # type: ignore[method-assign]
    with TestClient(make_app([text_double])) as c:
        text_double.recording = True
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(c.post, "/encode", json={"inputs": ["long batch"]})
            wait_until(lambda: text_double.batches == [1])
            assert c.get("/healthz").status_code == 200
            assert c.get("/metrics").status_code == 200
            # Answered while the forward pass was still held: the batch does not block the loop.
            assert not returned.is_set() and not busy.done()
            text_double.gate.set()
            assert busy.result().status_code == 200
        assert returned.is_set()


def test_a_request_whose_client_left_is_dropped(text_double: Wrapped) -> None:
    """Raw ASGI: the client sends its body, then disconnects while queued behind a long batch."""
    gate = text_double.gate = threading.Event()
    app = make_app([text_double], max_batch_size=1, max_wait_ms=0)

    async def scenario() -> tuple[int, list[int], str]:
        async with LifespanManager(app):
            text_double.recording = True
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                running = asyncio.ensure_future(client.post("/encode", json={"inputs": ["first"]}))
                while text_double.batches != [1]:
                    await asyncio.sleep(0.005)
                gone = asyncio.Event()
                sent: list[dict[str, Any]] = []
                body = b'{"inputs": ["the one who leaves"]}'
                messages = [{"type": "http.request", "body": body, "more_body": False}]

                async def receive() -> dict[str, Any]:
                    if messages:
                        return messages.pop(0)
                    await gone.wait()
                    return {"type": "http.disconnect"}

                async def send(message: dict[str, Any]) -> None:
                    sent.append(message)

                scope = {
                    "type": "http",
                    "asgi": {"version": "3.0"},
                    "http_version": "1.1",
                    "method": "POST",
                    "scheme": "http",
                    "path": "/encode",
                    "raw_path": b"/encode",
                    "query_string": b"",
                    "root_path": "",
                    "headers": [(b"content-type", b"application/json"), (b"host", b"t")],
                    "client": ("127.0.0.1", 1),
                    "server": ("127.0.0.1", 80),
                }
                leaving = asyncio.ensure_future(app(scope, receive, send))
                worker = app.state.attnserve.batcher.workers[TINY_TEXT]
                while worker.depth != 1:
                    await asyncio.sleep(0.005)
                gone.set()  # the client hangs up while queued
                await leaving
                gate.set()
                first = await running
                # Queued after the one who left: had that one not been dropped, it ran first.
                after = await client.post("/encode", json={"inputs": ["after"]})
                assert after.status_code == 200
                scrape = (await client.get("/metrics")).text
                return first.status_code, list(text_double.batches), scrape

    status, batches, scrape = asyncio.run(scenario())
    assert status == 200
    assert batches == [1, 1]  # the first request and the later one; never the one who left
    assert metric(scrape, "attnserve_rejections_total", reason="client_disconnected") == 1


def test_a_request_nobody_waits_for_stops_between_parts(text_double: Wrapped) -> None:
    # Six texts in parts of two. The first part is held until the client has had its 504, so
    # nobody waits when it ends: the other two parts never run, and the worker is free for the
    # next request.
    text_double.gate = threading.Event()
    app = make_app([text_double], max_batch_size=2, request_timeout_s=1.0)
    with TestClient(app) as c:
        text_double.recording = True
        with ThreadPoolExecutor(1) as pool:
            abandoned = pool.submit(c.post, "/encode", json={"inputs": [f"t{i}" for i in range(6)]})
            wait_until(lambda: text_double.batches == [2])  # the first part is running
            assert abandoned.result().status_code == 504
            text_double.gate.set()
        # Queued behind whatever the worker still has to do for the abandoned request.
        assert c.post("/encode", json={"inputs": ["next"]}).status_code == 200
        assert text_double.batches == [2, 1]
    assert text_double.batches == [2, 1]  # nor after the drain
