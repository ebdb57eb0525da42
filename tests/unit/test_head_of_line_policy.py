"""No head-of-line blocking, the decisions: the time slice sizes parts and caps batches, and
between two parts of a large request the waiting requests get one batch (pure functions)."""

from __future__ import annotations

from service.engine.batching.policy import (
    BatchKey,
    Decision,
    Limits,
    between_parts,
    next_batch,
    part_rows,
)
from service.engine.servables.base import TextCall
from tests.utils.batching import FLASH
from tests.utils.batching import FakePending as P  # on FLASH unless told

FULL = BatchKey(TextCall("full"), 256)
SLICE = Limits(max_batch_size=32, max_batch_tokens=10**9, max_wait_s=0.010, slice_seconds=0.25)


def per_row(key: BatchKey, rows: int, longest: int) -> float:
    """A stand-in estimate: 0.1 s a row, whatever the key (a 0.25 s slice holds two rows)."""
    return 0.1 * rows


def unmeasured(key: BatchKey, rows: int, longest: int) -> float | None:
    return None


# ----------------------------------------------------------------------------- part size


def test_a_request_over_the_slice_runs_in_parts_of_about_the_slice() -> None:
    assert part_rows(64, 256, SLICE, seconds=lambda n: 0.1 * n) == 2
    assert part_rows(2, 256, SLICE, seconds=lambda n: 0.1 * n) == 2  # within: one pass
    assert part_rows(64, 256, SLICE, seconds=lambda n: 1.0 * n) == 1  # one row over: alone
    # The other limits still apply; the smallest part wins.
    rows_capped = Limits(4, 10**9, 0.0, slice_seconds=10.0)
    assert part_rows(64, 256, rows_capped, seconds=lambda n: 0.1 * n) == 4


def test_before_the_backend_is_measured_or_with_no_slice_parts_are_as_before() -> None:
    assert part_rows(64, 256, SLICE, seconds=lambda n: None) == 32  # max_batch_size
    assert part_rows(64, 256, SLICE) == 32
    no_slice = Limits(32, 10**9, 0.010)
    assert part_rows(64, 256, no_slice, seconds=lambda n: 0.1 * n) == 32


# ----------------------------------------------------------------------------- batch formation


def test_no_batch_grows_past_the_slice_and_a_capped_batch_runs_at_once() -> None:
    pending = [P(), P(), P()]
    assert next_batch(pending, now=0.0, limits=SLICE, seconds=per_row).batch == (0, 1)
    # The tighter of the slice and the per-request bound caps it.
    both = Limits(32, 10**9, 0.010, max_request_seconds=0.15, slice_seconds=0.25)
    assert next_batch(pending, now=0.0, limits=both, seconds=per_row).batch == (0,)
    # Unmeasured: no time cap (the head waits max_wait for more, then takes all).
    assert next_batch(pending, now=1.0, limits=SLICE, seconds=unmeasured).batch == (0, 1, 2)


def test_a_head_over_the_slice_runs_alone() -> None:
    pending = [P(key=FULL, n_rows=64), P(key=FULL)]
    assert next_batch(pending, now=0.0, limits=SLICE, seconds=per_row).batch == (0,)


# ----------------------------------------------------------------------------- between parts


def test_after_a_part_the_waiting_requests_get_one_batch_at_once() -> None:
    # They arrived during the part, 1 ms ago: no max_wait pause (the part answered nobody).
    pending = [P(enqueued_at=0.999), P(enqueued_at=0.9995)]
    d = between_parts(pending, now=1.0, limits=SLICE, parts_turn=False, seconds=per_row)
    assert d == Decision(batch=(0, 1))
    # After that batch, the next part runs, though more requests wait.
    d = between_parts(pending, now=1.0, limits=SLICE, parts_turn=True, seconds=per_row)
    assert d == Decision(resume=True)


def test_with_nobody_waiting_the_next_part_runs() -> None:
    assert between_parts([], now=1.0, limits=SLICE, parts_turn=False) == Decision(resume=True)


def test_the_others_batch_is_one_batch_of_any_key_oldest_first_within_the_limits() -> None:
    pending = [P(key=FULL), P(key=FLASH), P(key=FULL), P(key=FULL)]
    d = between_parts(pending, now=1.0, limits=SLICE, parts_turn=False, seconds=per_row)
    assert d.batch == (0, 2)  # the oldest's key, two rows fill the slice; the rest wait
    assert not d.resume


def test_a_waiting_request_that_needs_parts_itself_waits_for_the_running_one() -> None:
    # The large waiting request is older, but running it would hold the worker for parts of
    # its own: the small one behind it gets the turn.
    pending = [P(key=FULL, n_rows=64, enqueued_at=0.1), P(key=FULL, enqueued_at=0.2)]
    d = between_parts(pending, now=1.0, limits=SLICE, parts_turn=False, seconds=per_row)
    assert d.batch == (1,)
    alone = between_parts(pending[:1], now=1.0, limits=SLICE, parts_turn=False, seconds=per_row)
    assert alone == Decision(resume=True)
    # Over the row limit too (no estimate needed).
    rows_over = [P(n_rows=40), P()]
    assert between_parts(rows_over, now=1.0, limits=SLICE, parts_turn=False).batch == (1,)


def test_expired_and_departed_are_reported_on_either_turn() -> None:
    pending = [P(deadline=0.5), P(cancelled=True), P()]
    for turn in (False, True):
        d = between_parts(pending, now=1.0, limits=SLICE, parts_turn=turn, seconds=per_row)
        assert d.expired == (0,) and d.dropped == (1,)
        assert d.batch == (() if turn else (2,))
        assert d.resume == turn


def test_turns_alternate_so_neither_side_starves() -> None:
    """A steady stream of small requests beside a request in six parts: part, batch, part, ...
    (what the worker does with each decision, simulated)."""
    parts_left, turn, log = 6, False, []
    pending: list[P] = []
    for step in range(40):
        if parts_left == 0:
            break
        pending.append(P(enqueued_at=float(step)))  # one arrival per turn
        d = between_parts(pending, float(step), SLICE, turn, seconds=per_row)
        if d.resume:
            parts_left -= 1
            log.append("part")
            turn = False
        else:
            pending = [p for i, p in enumerate(pending) if i not in d.batch]
            log.append(f"batch of {len(d.batch)}")
            turn = True
    assert log[:2] == ["batch of 1", "part"]
    assert log[2:] == ["batch of 2", "part"] * 5  # two arrivals per round, two rows per slice
