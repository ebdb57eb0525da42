"""A failed batch costs few forward passes, each its own worker turn (issue 37, 7a).

A model that raises for some rows: the runner must still answer every request batched beside a
bad one, without paying ``2n - 1`` passes when the fault strikes every row. A stand-in model,
no HTTP, no threads."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from models.errors import ModelInputError
from service.engine.batching.device import DeviceRuntime
from service.engine.batching.execute import BatchRun, Outcome
from service.engine.batching.job import Job
from service.engine.batching.policy import BatchKey, Limits
from service.engine.servables.base import TextCall
from service.errors import InternalError, InvalidRequest, OutOfDeviceMemory

KEY = BatchKey(TextCall("full"), 16)
RUNTIME = DeviceRuntime(torch.device("cpu"))
LIMITS = Limits(max_batch_size=64, max_batch_tokens=10**9, max_wait_s=0.0)


def requests(loop: asyncio.AbstractEventLoop, n: int) -> list[Job]:
    """``n`` one-row requests; request ``k``'s row is ``k``."""
    return [
        Job(
            key=KEY,
            rows=[k],
            lengths=[5],
            finish=list,
            future=loop.create_future(),
            enqueued_at=0.0,
            deadline=100.0,
            request_id=f"req-{k}",
        )
        for k in range(n)
    ]


class Faulty:
    """Doubles each row; raises ``error`` for any batch holding a row in ``bad`` (a deterministic
    per-row fault), or ``torch.OutOfMemoryError`` for batches over ``fits`` rows."""

    def __init__(
        self,
        bad: Callable[[int], bool],
        error: Callable[[str], Exception] = RuntimeError,
        fits: int | None = None,
    ) -> None:
        self.bad, self.error, self.fits = bad, error, fits
        self.passes: list[list[int]] = []

    def __call__(self, rows: list[Any]) -> list[Any]:
        self.passes.append(list(rows))
        if self.fits is not None and len(rows) > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        if any(self.bad(r) for r in rows):
            raise self.error(f"row {next(r for r in rows if self.bad(r))} is broken (injected)")
        return [2 * r for r in rows]


def run_counting_turns(run: BatchRun, model: Faulty) -> tuple[list[Outcome], int]:
    """Step ``run`` to its end; checks that no step runs more than one forward pass (each pass
    is a worker turn) and returns the outcomes and the number of steps."""
    steps = 0
    while True:
        before = len(model.passes)
        outcomes = run.step()
        steps += 1
        assert len(model.passes) - before <= 1, "a step ran several forward passes back to back"
        if outcomes is not None:
            return outcomes, steps


def one_bisection(n: int) -> int:
    """Passes that isolate one bad request among ``n`` by halving: the batch, then both halves
    at each of ``ceil(log2 n)`` levels."""
    return 1 + 2 * math.ceil(math.log2(n))


@pytest.mark.parametrize("n", [2, 8, 32, 33])
@pytest.mark.parametrize(
    ("error", "status"), [(ModelInputError, InvalidRequest), (RuntimeError, InternalError)]
)
def test_one_bad_request_fails_alone_in_a_bisection_of_passes(
    loop: asyncio.AbstractEventLoop, n: int, error: Any, status: type
) -> None:
    bad = n // 2 + 1 if n > 2 else 1
    model = Faulty(lambda r: r == bad, error)
    jobs = requests(loop, n)
    outcomes, _ = run_counting_turns(BatchRun(jobs, model, RUNTIME, "full", LIMITS), model)
    assert [o.job for o in outcomes] == jobs
    assert len(model.passes) <= one_bisection(n)
    for k, o in enumerate(outcomes):
        if k == bad:
            assert isinstance(o.error, status) and o.value is None
        else:
            assert o.error is None and o.value == [2 * k]


@pytest.mark.parametrize("n", [8, 32])
def test_a_server_fault_on_every_row_costs_three_passes_not_2n_minus_1(
    loop: asyncio.AbstractEventLoop, n: int
) -> None:
    # Bisecting it to single requests took 2n - 1 passes back to back (63 for 32 requests).
    model = Faulty(lambda r: True, RuntimeError)
    outcomes, steps = run_counting_turns(
        BatchRun(requests(loop, n), model, RUNTIME, "full", LIMITS), model
    )
    assert len(model.passes) == 3  # the batch, then both halves: the fault is not one row's
    assert steps == 3
    assert all(isinstance(o.error, InternalError) for o in outcomes)
    assert all("secret" not in o.error.message for o in outcomes if o.error is not None)


@pytest.mark.parametrize("n", [8, 32])
def test_every_row_refused_by_the_model_gets_its_own_422_in_n_plus_3_passes(
    loop: asyncio.AbstractEventLoop, n: int
) -> None:
    # A refusal is about a row's input: each request must get its own, so once both halves
    # fail the requests are tried one at a time (n passes), not bisected (2n - 1 in all).
    model = Faulty(lambda r: True, ModelInputError)
    outcomes, _ = run_counting_turns(
        BatchRun(requests(loop, n), model, RUNTIME, "full", LIMITS), model
    )
    assert len(model.passes) == n + 3 < 2 * n - 1
    for k, o in enumerate(outcomes):
        assert isinstance(o.error, InvalidRequest) and f"row {k} " in o.error.message


def test_two_refused_rows_in_both_halves_harm_nobody_beside_them(
    loop: asyncio.AbstractEventLoop,
) -> None:
    model = Faulty(lambda r: r in (1, 6), ModelInputError)
    outcomes, _ = run_counting_turns(
        BatchRun(requests(loop, 8), model, RUNTIME, "full", LIMITS), model
    )
    assert [o.error is not None for o in outcomes] == [k in (1, 6) for k in range(8)]
    assert [o.value for o in outcomes if o.error is None] == [[0], [4], [6], [8], [10], [14]]
    assert len(model.passes) == 1 + 2 + 8


@pytest.mark.parametrize(
    ("raised", "answers", "passes"),
    [
        # Both in the first half: it fails alone (bisected), both its quarters fail: one at a time.
        (
            {1: ModelInputError, 2: ModelInputError},
            {1: InvalidRequest, 2: InvalidRequest},
            [8, 4, 4, 2, 2, 1, 1, 1, 1],
        ),
        # One in each half, a refusal and a server fault: the refusing half is tried a request
        # at a time, the faulting half fails with its fault as a whole (rows 4-7).
        (
            {1: ModelInputError, 6: RuntimeError},
            {
                1: InvalidRequest,
                4: InternalError,
                5: InternalError,
                6: InternalError,
                7: InternalError,
            },
            [8, 4, 4, 1, 1, 1, 1],
        ),
    ],
)
def test_which_request_gets_which_error_with_two_bad_rows(
    loop: asyncio.AbstractEventLoop,
    raised: dict[int, Callable[[str], Exception]],
    answers: dict[int, type],
    passes: list[int],
) -> None:
    model = Faulty(lambda r: r in raised, lambda m: raised[int(m.split()[1])](m))
    jobs = requests(loop, 8)
    outcomes, _ = run_counting_turns(BatchRun(jobs, model, RUNTIME, "full", LIMITS), model)
    for k, o in enumerate(outcomes):
        if k not in answers:
            assert o.error is None and o.value == [2 * k]
            continue
        assert isinstance(o.error, answers[k]) and o.value is None
        if answers[k] is InvalidRequest:  # a refusal: the request's own
            assert f"row {k} " in o.error.message
    assert len({id(outcomes[k].error) for k in (4, 5, 6, 7) if k in answers}) <= 1
    assert [len(p) for p in model.passes] == passes


def test_out_of_memory_still_splits_down_to_what_fits(loop: asyncio.AbstractEventLoop) -> None:
    # Memory depends on the batch's composition: halves are retried however many fail.
    model = Faulty(lambda r: False, fits=2)
    outcomes, _ = run_counting_turns(
        BatchRun(requests(loop, 8), model, RUNTIME, "full", LIMITS), model
    )
    assert [o.value for o in outcomes] == [[2 * k] for k in range(8)]
    assert [len(p) for p in model.passes] == [8, 4, 4, 2, 2, 2, 2]
    lone = Faulty(lambda r: False, fits=0)
    outcomes, _ = run_counting_turns(
        BatchRun(requests(loop, 2), lone, RUNTIME, "full", LIMITS), lone
    )
    assert all(isinstance(o.error, OutOfDeviceMemory) for o in outcomes)


def test_requests_whose_clients_left_are_not_retried(loop: asyncio.AbstractEventLoop) -> None:
    model = Faulty(lambda r: r == 0, ModelInputError)
    jobs = requests(loop, 4)
    run = BatchRun(jobs, model, RUNTIME, "full", LIMITS)
    assert run.step() is None  # the batch failed; its retries are the next turns
    for j in jobs[2:]:
        j.cancelled = True  # the clients of the second half leave meanwhile
    outcomes = run.run_to_end()
    assert all(4 not in p and 3 not in p and 2 not in p for p in model.passes[1:])
    assert outcomes[1].value == [2]
    assert isinstance(outcomes[0].error, InvalidRequest)
