"""No probe, no model waits behind another (issue 50 item 4), proven by order, never by time:

* with one intra-op torch thread per process (the default under ``workers`` auto) each model
  runs its batches on a thread of its own, so a forecast is answered while another model's
  forward pass is held (it used to queue behind it on the one shared thread);
* GIL-bound request work (tokenising large texts, token listings, writing large answers) runs
  on one helper thread, one request at a time, so the event loop shares the GIL with one other
  Python thread at most (Starlette's pool ran one thread per request: 16 at the GIL at once).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.engine.batching.worker import ModelWorker
from tests.service.helpers import (
    TINY_FORECAST,
    TINY_TEXT,
    Wrapped,
    forecast_servable,
    hourly_series,
    make_app,
    text_servable,
    wait_until,
)


class Held(Wrapped):
    """Its forward passes wait for :attr:`release` (once recording); :attr:`entered` is set
    when one has started."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        self.threads.add(threading.current_thread().name)
        if self.recording:
            self.entered.set()
            self.release.wait(30)
        return super().run(rows, call)


def test_a_forecast_is_answered_while_another_model_runs_a_forward_pass(tmp_path: Path) -> None:
    text = Held(text_servable())
    forecast = Wrapped(forecast_servable(tmp_path / TINY_FORECAST))
    app = make_app([text, forecast], torch_threads=1)
    with TestClient(app) as client, ThreadPoolExecutor(1) as pool:
        text.recording = True
        held = pool.submit(client.post, "/encode", json={"inputs": ["held"]})
        assert text.entered.wait(10)
        series = hourly_series(30, seed=1)
        answer = client.post("/forecast", json={"model": TINY_FORECAST, "series": [series]})
        still_held = not held.done()
        text.release.set()
        assert answer.status_code == 200
        assert still_held  # answered while the text model's forward pass had not finished
        assert held.result(10).status_code == 200
        workers: dict[str, ModelWorker] = client.app.state.attnserve.batcher.workers  # type: ignore[attr-defined]
        assert workers[TINY_TEXT]._executor is not workers[TINY_FORECAST]._executor


class Preparing(Wrapped):
    """Records the threads that prepare requests and how many prepare at once."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.threads: set[str] = set()
        self.overlap = threading.Event()

    def prepare(self, checked: Any) -> Any:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)
        try:
            self.overlap.wait(0.2)  # overlap with the other requests, if they run at once
            return self.inner.prepare(checked)
        finally:
            with self.lock:
                self.now -= 1


def test_large_texts_are_prepared_one_at_a_time_off_the_event_loop() -> None:
    text = Preparing(text_servable())
    long_text = "a few words to read " * 400  # over the inline limit: prepared in a thread
    with TestClient(make_app([text], max_text_tokens=512)) as client:
        with ThreadPoolExecutor(4) as pool:
            body = {"inputs": [long_text], "truncate": True}
            answers = list(pool.map(lambda _: client.post("/encode", json=body), range(4)))
        assert [a.status_code for a in answers] == [200] * 4
    assert text.most == 1  # never two at the GIL beside the event loop
    assert len(text.threads) == 1 and next(iter(text.threads)).startswith("attnserve-cpu")


def test_a_token_listing_is_written_on_the_one_helper_thread(monkeypatch: Any) -> None:
    import service.http.render as render

    written_on: list[str] = []
    rows_json = render._rows_json

    def recording(*args: Any) -> bytes:
        written_on.append(threading.current_thread().name)
        return rows_json(*args)

    monkeypatch.setattr(render, "_rows_json", recording)
    with TestClient(make_app([text_servable()])) as client:
        words = " ".join(f"word{i}" for i in range(2000))
        answer = client.post("/tokenize", json={"inputs": [words] * 3})
        assert answer.status_code == 200
        wait_until(lambda: bool(written_on))
    assert all(name.startswith("attnserve-cpu") for name in written_on), written_on
