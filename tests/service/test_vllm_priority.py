"""vLLM's ``priority`` reaches the batcher through HTTP: requests queued behind a running batch
run lowest value first, whatever order they arrived in, and the batch caps still hold."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import (
    TINY_TEXT,
    Wrapped,
    make_app,
    post_behind_a_running_batch,
    text_servable,
)


@pytest.fixture()
def setup() -> Iterator[tuple[TestClient, Wrapped]]:
    double = Wrapped(text_servable())
    # Four rows a batch: the 2-, 3- and 4-row requests below never share one, so the order
    # of the model's calls (by their row counts) is the order they were taken from the queue.
    with TestClient(make_app([double], max_batch_size=4, max_wait_ms=0.0)) as client:
        yield client, double


def body(rows: int, **extra: object) -> dict[str, object]:
    return {"model": TINY_TEXT, "input": [f"text {i}" for i in range(rows)], **extra}


def test_a_lower_priority_is_taken_first_from_the_backlog(
    setup: tuple[TestClient, Wrapped],
) -> None:
    client, double = setup
    queued = [body(4, priority=5), body(3), body(2, priority=-5)]
    _, answers = post_behind_a_running_batch(client, double, "/pooling", body(1), queued)
    assert [r.status_code for r in answers] == [200, 200, 200]
    assert double.batches == [2, 3, 4]  # -5, then 0 (the default), then 5


def test_without_priorities_the_queue_stays_first_come(
    setup: tuple[TestClient, Wrapped],
) -> None:
    client, double = setup
    # Same bodies, no priority: arrival order decides; posted together, any order is
    # possible, so only the caps are checked (each ran alone, whole).
    queued = [body(4), body(3), body(2)]
    _, answers = post_behind_a_running_batch(client, double, "/pooling", body(1), queued)
    assert [r.status_code for r in answers] == [200, 200, 200]
    assert sorted(double.batches) == [2, 3, 4]


def test_cohere_v2_priority_takes_the_same_path(setup: tuple[TestClient, Wrapped]) -> None:
    client, double = setup

    def embed(rows: int, **extra: object) -> dict[str, object]:
        return {"model": TINY_TEXT, "texts": [f"text {i}" for i in range(rows)], **extra}

    queued = [embed(4, priority=9), embed(3, priority=1), embed(2)]
    _, answers = post_behind_a_running_batch(client, double, "/v2/embed", embed(1), queued)
    assert [r.status_code for r in answers] == [200, 200, 200], answers[0].text
    assert double.batches == [2, 3, 4]
