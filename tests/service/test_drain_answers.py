"""When a drain's grace runs out, every accepted request still gets an answer (issue 37, 7c):
the batch in flight, the one between two of its parts and the queued ones get a 503
``shutting_down``, at once, not the request timeout's 504 (or nothing) later.

The forward pass is held by an event (not slowed), so the order cannot change on a busy machine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from service.engine.batching.batcher import Batcher
from service.engine.batching.device import DeviceRuntime
from service.engine.batching.policy import BatchKey, Limits
from service.engine.servables.base import TextCall
from service.errors import STATUS, ShuttingDown
from service.observability.metrics import Metrics

KEY = BatchKey(TextCall("full"), 16)
TIMEOUT_S = 30.0  # the request timeout: the answers must come long before it


class Gated:
    """A stand-in model whose forward pass waits for :attr:`release`; :attr:`entered` is set
    when a pass starts."""

    name = "gated"
    task = "encode"

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.passes = 0

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        self.passes += 1
        self.entered.set()
        assert self.release.wait(TIMEOUT_S), "the test never released the forward pass"
        return list(rows)


@pytest.fixture
def model() -> Iterator[Gated]:
    model = Gated()
    yield model
    model.release.set()  # never leave the process's torch thread blocked


async def drained(model: Gated, limits: Limits, rows: list[list[int]]) -> list[BaseException]:
    """Submit one request per entry of ``rows``, wait until the first forward pass is held,
    drain with a short grace, and return what each request got."""
    batcher = Batcher(
        [model],  # type: ignore[list-item]
        limits,
        max_queue=16,
        timeout_s=TIMEOUT_S,
        runtime=DeviceRuntime(torch.device("cpu")),
        metrics=Metrics(),
    )
    batcher.start()

    async def submit(r: list[int]) -> Any:
        return await batcher.submit("gated", KEY, r, [1] * len(r), list)

    tasks = [asyncio.create_task(submit(r)) for r in rows[:1]]
    await asyncio.to_thread(model.entered.wait, TIMEOUT_S)
    tasks += [asyncio.create_task(submit(r)) for r in rows[1:]]  # queued behind it
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await batcher.drain(0.05)  # the grace runs out with the pass still held
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=5.0)
    assert loop.time() - started < 5.0
    model.release.set()
    return list(results)


def test_the_batch_in_flight_gets_a_503_when_the_grace_runs_out(model: Gated) -> None:
    limits = Limits(max_batch_size=8, max_batch_tokens=10**6, max_wait_s=0.0)
    results = asyncio.run(drained(model, limits, [[1, 2], [3]]))
    assert all(isinstance(r, ShuttingDown) for r in results), results
    assert all(STATUS[r.type] == 503 for r in results if isinstance(r, ShuttingDown))
    assert "shut down" in str(results[0])


def test_a_request_between_two_of_its_parts_gets_a_503_too(model: Gated) -> None:
    # One row per pass: the three-row request runs in three parts; its first part is held.
    limits = Limits(max_batch_size=1, max_batch_tokens=10**6, max_wait_s=0.0)
    results = asyncio.run(drained(model, limits, [[1, 2, 3], [4]]))
    assert all(isinstance(r, ShuttingDown) for r in results), results
