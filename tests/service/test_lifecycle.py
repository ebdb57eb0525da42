"""Start-up (ready only after loading and warm-up), draining, start-up failure, API keys."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.helpers import TINY_TEXT, Wrapped, make_app, wait_until


def test_ready_only_after_models_load_and_warm_up(text_double: Wrapped) -> None:
    loaded = threading.Event()
    warmed: list[int] = []

    def slow_loader(_settings: Settings, _device: str) -> list[Any]:
        loaded.wait(10)
        return [text_double]

    original = text_double.warmup_batches

    def counting_warmup(backend: str) -> Any:
        warmed.append(1)
        return original(backend)

    text_double.warmup_batches = counting_warmup  # type: ignore[attr-defined]
    settings = Settings(models=(TINY_TEXT,), background_load=True, device="cpu")
    with TestClient(create_app(settings, loader=slow_loader)) as c:
        assert c.get("/healthz").status_code == 200  # alive while loading
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["error"]["type"] == "not_ready"
        r = c.post("/encode", json={"inputs": ["too early"]})
        assert r.status_code == 503 and r.json()["error"]["type"] == "not_ready"
        assert c.get("/models").status_code == 503
        loaded.set()
        deadline = time.monotonic() + 10
        while c.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert warmed  # warm-up ran before ready
        assert c.post("/encode", json={"inputs": ["now"]}).status_code == 200
        assert "attnserve_ready 1.0" in c.get("/metrics").text


def test_every_served_backend_is_warmed_up(text_double: Wrapped) -> None:
    seen: list[tuple[str, int]] = []  # (backend, rows) of every forward pass
    original = text_double.run

    def spy(rows: list[Any], call: Any) -> list[Any]:
        seen.append((call.backend, len(rows)))
        return original(rows, call)

    text_double.run = spy  # type: ignore[method-assign]
    with TestClient(make_app([text_double])):
        backends = text_double.backends()
        assert {backend for backend, _ in seen} == set(backends)
        for backend in backends:
            runs = [rows for b, rows in seen if b == backend]
            # Each backend's warm-up batches, then its calibration batch, timed at least once.
            warm = [len(rows) for rows, _ in text_double.warmup_batches(backend)]
            calibration = len(text_double.calibration_batch(backend)[0])
            assert runs[: len(warm)] == warm, backend
            assert runs[len(warm) :] and set(runs[len(warm) :]) == {calibration}, backend


def test_draining_turns_readyz_and_model_routes_to_503(client: TestClient) -> None:
    lifecycle = client.app.state.attnserve.lifecycle  # type: ignore[attr-defined]
    lifecycle.begin_drain()
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["error"]["type"] == "shutting_down"
    r = client.post("/encode", json={"inputs": ["late"]})
    assert r.status_code == 503 and r.json()["error"]["type"] == "shutting_down"
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_start_up_failure_fails_health(text_double: Wrapped) -> None:
    def broken(_settings: Settings, _device: str) -> list[Any]:
        raise FileNotFoundError("no Informer checkpoint 'informer-etth1-h24'")

    settings = Settings(models=("informer-etth1-h24",), background_load=True, device="cpu")
    with TestClient(create_app(settings, loader=broken)) as c:
        deadline = time.monotonic() + 5
        while c.get("/healthz").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        body = c.get("/healthz").json()
        assert "informer-etth1-h24" in body["error"]["message"]
        assert c.get("/readyz").status_code == 503


def test_start_up_failure_in_foreground_raises() -> None:
    def broken(_settings: Settings, _device: str) -> list[Any]:
        raise FileNotFoundError("missing weights")

    settings = Settings(models=("x",), background_load=False, device="cpu")
    with pytest.raises(FileNotFoundError), TestClient(create_app(settings, loader=broken)):
        pass


def test_queued_requests_finish_during_lifespan_drain(text_double: Wrapped) -> None:
    """One request running and two queued when the lifespan's shutdown begins: the drain waits
    for all three, so each gets its 200 (not a 503 or 504) while the server shuts down."""
    gate = text_double.gate = threading.Event()  # holds the running batch until the drain began
    app = make_app([text_double], max_batch_size=1, max_wait_ms=0, shutdown_grace_s=60)
    state = app.state.attnserve
    results: dict[int, int] = {}
    seen_at_drain: dict[str, Any] = {}

    def release_once_draining() -> None:
        wait_until(lambda: state.lifecycle.draining, timeout=60)
        worker = state.batcher.workers[TINY_TEXT]
        seen_at_drain.update(depth=worker.depth, answered=dict(results))
        late = c.post("/encode", json={"inputs": ["arrived during the drain"]})
        seen_at_drain["late"] = late.status_code
        gate.set()

    with TestClient(app) as c:
        text_double.recording = True

        def call(i: int) -> None:
            results[i] = c.post("/encode", json={"inputs": [f"t{i}"]}).status_code

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        worker = state.batcher.workers[TINY_TEXT]
        wait_until(lambda: text_double.batches == [1] and worker.depth == 2)
        releaser = threading.Thread(target=release_once_draining)
        releaser.start()
    # Leaving the block ran the lifespan's shutdown, which returned only after the drain.
    releaser.join(60)
    for t in threads:
        t.join(60)
    assert seen_at_drain == {"depth": 2, "answered": {}, "late": 503}
    assert results == {0: 200, 1: 200, 2: 200}
    assert text_double.batches == [1, 1, 1]


class TestApiKey:
    @pytest.fixture
    def secured(self, text_double: Wrapped) -> Any:
        with TestClient(make_app([text_double], api_key="s3cret")) as c:
            yield c

    def test_model_routes_need_the_key(self, secured: TestClient) -> None:
        for method, path, body in [
            ("post", "/encode", {"inputs": ["x"]}),
            ("post", "/v1/embeddings", {"input": "x", "model": TINY_TEXT}),
            ("post", "/forecast", {"model": "m", "series": []}),
            ("get", "/models", None),
            # text-embeddings-inference's routes and infinity's classify
            ("post", "/embed", {"inputs": "x"}),
            ("post", "/rerank", {"query": "q", "texts": ["x"]}),
            ("post", "/predict", {"inputs": "x"}),
            ("post", "/v1/rerank", {"query": "q", "documents": ["x"]}),
            ("post", "/v1/classify", {"input": ["x"]}),
            ("get", "/no-such-route", None),
        ]:
            r = getattr(secured, method)(path, **({"json": body} if body else {}))
            assert r.status_code == 401, path
            assert r.json()["error"]["type"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
        wrong = secured.post(
            "/encode", json={"inputs": ["x"]}, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401

    def test_right_key_passes_and_health_stays_open(self, secured: TestClient) -> None:
        ok = secured.post(
            "/encode", json={"inputs": ["x"]}, headers={"Authorization": "Bearer s3cret"}
        )
        assert ok.status_code == 200
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
            assert secured.get(path).status_code == 200, path


@pytest.fixture
def nothing_frozen() -> Iterator[None]:
    """No object in the GC's permanent generation: ``gc.freeze`` is process-wide and every app
    an earlier test started froze its objects. Frozen again afterwards if it was before."""
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    yield
    gc.unfreeze()
    if was_frozen:
        gc.freeze()


def is_frozen(obj: object) -> bool:
    """Tracked by the cyclic GC, yet in none of its generations: in the permanent one."""
    return gc.is_tracked(obj) and all(o is not obj for o in gc.get_objects())


def test_start_up_objects_are_frozen_out_of_the_cyclic_gc(
    text_double: Wrapped, nothing_frozen: None
) -> None:
    # Full collections would otherwise walk everything torch and the models allocated, on the
    # event loop, whenever a large body creates enough new objects.
    app = make_app([text_double])
    assert gc.get_freeze_count() == 0
    assert not is_frozen(text_double)
    with TestClient(app):
        state = app.state.attnserve
        assert gc.get_freeze_count() > 10_000
        # The models and what start-up built around them are out of the collector's reach.
        assert is_frozen(text_double)
        assert is_frozen(state.batcher) and is_frozen(state.registry)
