"""No head-of-line blocking, the runner: a batch over a limit runs one part per step (so the
worker can run other batches between), and the joined answer, stats and failures are those of
running it at once. A stand-in model, no HTTP, no threads."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import torch

from service.engine.batching import execute
from service.engine.batching.device import DeviceRuntime
from service.engine.batching.execute import BatchRun
from service.engine.batching.job import Job
from service.engine.batching.policy import BatchKey, Limits
from service.engine.servables.base import TextCall
from service.errors import ClientDisconnected, OutOfDeviceMemory

KEY = BatchKey(TextCall("full"), 16)
RUNTIME = DeviceRuntime(torch.device("cpu"))
ROWS_OF_TWO = Limits(max_batch_size=2, max_batch_tokens=10**9, max_wait_s=0.0)


def job(loop: asyncio.AbstractEventLoop, lengths: list[int], finish: Any = list) -> Job:
    """A request whose rows are their own indices (``row i`` has length ``lengths[i]``)."""
    return Job(
        key=KEY,
        rows=[f"row {i}" for i in range(len(lengths))],
        lengths=lengths,
        finish=finish,
        future=loop.create_future(),
        enqueued_at=0.0,
        deadline=100.0,
    )


class Model:
    """Echoes each row with its batch's size; records the batches, optionally sleeps or fails."""

    def __init__(self, delay_s: float = 0.0, fail_on: int | None = None) -> None:
        self.batches: list[list[Any]] = []
        self.delay_s, self.fail_on = delay_s, fail_on

    def __call__(self, rows: list[Any]) -> list[Any]:
        self.batches.append(rows)
        if self.fail_on is not None and len(self.batches) == self.fail_on:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        time.sleep(self.delay_s)
        return [f"{row} in {len(rows)}" for row in rows]


def test_one_part_per_step_longest_first_joined_in_order_finish_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    finished: list[list[Any]] = []

    def finish(out: list[Any]) -> list[Any]:
        finished.append(out)
        return out

    request = job(loop, [3, 9, 5, 7, 1], finish=finish)
    model = Model()
    run = BatchRun([request], model, RUNTIME, "full", ROWS_OF_TWO)
    assert (run.part, run.parts) == (2, 3)
    assert run.step() is None and run.step() is None  # two parts done, one to go
    assert finished == []
    outcomes = run.step()
    assert outcomes is not None and finished == [outcomes[0].value]
    assert model.batches == [["row 1", "row 3"], ["row 2", "row 0"], ["row 4"]]  # 9 7 | 5 3 | 1
    assert outcomes[0].value == [
        "row 0 in 2",
        "row 1 in 2",
        "row 2 in 2",
        "row 3 in 2",
        "row 4 in 1",
    ]
    stats = outcomes[0].stats
    assert stats is not None and (stats.rows, stats.requests, stats.tokens) == (2, 1, 18)


def test_stepping_gives_what_running_it_at_once_gives(loop: asyncio.AbstractEventLoop) -> None:
    lengths = [4, 8, 2, 6, 8, 1, 3]
    stepped = BatchRun([job(loop, lengths)], Model(), RUNTIME, "full", ROWS_OF_TWO)
    while (outcomes := stepped.step()) is None:
        pass
    at_once = BatchRun([job(loop, lengths)], Model(), RUNTIME, "full", ROWS_OF_TWO).run_to_end()
    assert outcomes[0].value == at_once[0].value


class FakeClock:
    """Stands in for the ``time`` module of the runner: seconds pass only when a test says so,
    so timings are exact on a busy machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_inference_time_is_the_sum_of_the_parts_not_the_wait_between(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(execute, "time", clock)

    class TimedModel(Model):
        def __call__(self, rows: list[Any]) -> list[Any]:
            clock.sleep(0.05 * len(rows))  # a part of two rows takes 0.1 s
            return super().__call__(rows)

    run = BatchRun([job(loop, [5] * 6)], TimedModel(), RUNTIME, "full", ROWS_OF_TWO)
    steps = 1
    while (outcomes := run.step()) is None:
        clock.sleep(7.0)  # another batch's turn
        steps += 1
    stats = outcomes[0].stats
    assert stats is not None and steps == 3
    assert stats.inference_s == pytest.approx(3 * 0.1)


def test_the_time_slice_sets_the_part_and_an_unmeasured_backend_keeps_the_old_one(
    loop: asyncio.AbstractEventLoop,
) -> None:
    sliced = Limits(32, 10**9, 0.0, slice_seconds=0.25)

    def seconds(rows: int, longest: int) -> float:
        return 0.1 * rows

    run = BatchRun([job(loop, [5] * 7)], Model(), RUNTIME, "full", sliced, seconds=seconds)
    assert (run.part, run.parts) == (2, 4)
    unmeasured = BatchRun(
        [job(loop, [5] * 7)], Model(), RUNTIME, "full", sliced, seconds=lambda n, m: None
    )
    assert unmeasured.parts == 1


def test_nobody_waiting_stops_it_between_parts(loop: asyncio.AbstractEventLoop) -> None:
    request, model = job(loop, [5] * 6), Model()
    run = BatchRun([request], model, RUNTIME, "full", ROWS_OF_TWO)
    assert run.step() is None
    request.cancelled = True  # the client left (or its deadline passed) during the part
    outcomes = run.step()
    assert outcomes is not None and isinstance(outcomes[0].error, ClientDisconnected)
    assert len(model.batches) == 1


def test_a_part_out_of_memory_is_a_clear_error_for_the_lone_request(
    loop: asyncio.AbstractEventLoop,
) -> None:
    run = BatchRun([job(loop, [5] * 6)], Model(fail_on=2), RUNTIME, "full", ROWS_OF_TWO)
    assert run.step() is None
    outcomes = run.step()
    assert outcomes is not None and isinstance(outcomes[0].error, OutOfDeviceMemory)
    assert "does not fit in device memory" in str(outcomes[0].error)
