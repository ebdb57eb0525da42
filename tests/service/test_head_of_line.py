"""No head-of-line blocking, through HTTP: a small request sent while a large request runs in
parts is answered between its parts, before the large one finishes, and the large one's
embeddings are exactly those it gets alone.

Order is proven by the model's own call log and by holding a part until the small answer is in,
never by wall time, so a slow machine cannot make these flake.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.engine.batching.policy import BatchKey, length_bucket
from service.engine.batching.worker import ModelWorker
from tests.service.helpers import TINY_TEXT, Wrapped, make_app, wait_until

LARGE = {"inputs": [f"text number {i} " + "with some words " * (1 + i % 4) for i in range(8)]}
SMALL = {"inputs": ["hello"]}


def worker_of(client: TestClient) -> ModelWorker:
    return client.app.state.attnserve.batcher.workers[TINY_TEXT]  # type: ignore[attr-defined]


def small_between_parts(client: TestClient, double: Wrapped) -> tuple[Any, Any, list[int]]:
    """Post :data:`LARGE`; hold its first part until :data:`SMALL` is queued, and its second
    until the small answer has reached the client. Returns (large response, small response,
    the rows of each model call up to the small answer)."""
    worker = worker_of(client)
    double.recording = True
    double.gate = threading.Event()  # holds the first part
    second_part = threading.Event()
    calls = len(double.batches)

    def hold_the_second_part(rows: list[Any]) -> None:
        if len(double.batches) == calls + 3:  # large part 1, the small batch, large part 2
            second_part.wait(10)

    double.fail = hold_the_second_part
    with ThreadPoolExecutor(2) as pool:
        large = pool.submit(client.post, "/encode", json=LARGE)
        wait_until(lambda: len(double.batches) == calls + 1)
        small = pool.submit(client.post, "/encode", json=SMALL)
        wait_until(lambda: worker.depth == 1)
        double.gate.set()
        small_response = small.result(timeout=10)
        assert not large.done()  # its second part is held: it cannot have finished
        wait_until(lambda: len(double.batches) == calls + 3)
        so_far = double.batches[calls:]
        second_part.set()
        large_response = large.result(timeout=10)
    double.gate = double.fail = None
    return large_response, small_response, so_far


def test_a_small_request_is_answered_between_the_parts_of_a_large_one(
    text_double: Wrapped,
) -> None:
    # The row limit makes the parts here (two rows each); the time slice does the same below.
    with TestClient(make_app([text_double], max_batch_size=2)) as c:
        large, small, calls = small_between_parts(c, text_double)
        assert (large.status_code, small.status_code) == (200, 200)
        assert calls == [2, 1, 2]  # part 1, the small batch, part 2 (held)
        assert text_double.batches[-2:] == [2, 2]  # then the last two parts
        assert small.headers["x-batch-size"] == "1"
        assert large.headers["x-batch-size"] == "2"  # one forward pass, not the request
        text_double.recording = False
        alone = c.post("/encode", json=LARGE)
        assert alone.json()["embeddings"] == large.json()["embeddings"]  # exact


def test_the_time_slice_splits_a_request_that_is_within_the_batch_limits(
    text_double: Wrapped,
) -> None:
    with TestClient(make_app([text_double], max_batch_size=32, batch_slice_s=1.0)) as c:
        worker = worker_of(c)
        text_double.recording = True
        whole = c.post("/encode", json=LARGE)
        assert text_double.batches == [8]  # well within the slice: one forward pass
        # A slice of 1 s, and rates pinned so the large request's 8 rows need 3.2 s (0.4 s a
        # row, away from the edge): the most rows within the slice is 2.
        servable = worker.servable
        lengths = [len(ids) for ids in servable.tokenize(LARGE["inputs"])]  # type: ignore[attr-defined]
        longest = max(lengths)
        key = BatchKey(servable.default_call("flash"), length_bucket(longest))
        rate = servable.work_estimate(key.call, len(lengths), longest) / 3.2
        worker.cost.rates.update({(b, None, "float32"): rate for b in servable.backends()})
        assert worker.limits.slice_seconds == 1.0  # settings.batch_slice_s, as the app hands it

        part = 2
        assert worker.seconds_estimate(key, part, longest) == pytest.approx(0.8)  # the premise
        text_double.batches.clear()
        large, _, calls = small_between_parts(c, text_double)
        assert calls == [part, 1, part]
        assert sum(text_double.batches) - 1 == len(lengths)
        assert large.headers["x-batch-size"] == str(part)
        assert large.json()["embeddings"] == c.post("/encode", json=LARGE).json()["embeddings"]
        assert (
            max(
                abs(a - b)
                for got, want in zip(
                    large.json()["embeddings"], whole.json()["embeddings"], strict=True
                )
                for a, b in zip(got, want, strict=True)
            )
            < 1e-5
        )  # parts of other sizes: equal up to float summation order
