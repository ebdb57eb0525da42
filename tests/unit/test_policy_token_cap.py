"""A batch at its token cap runs at once: waiting ``max_wait_s`` cannot grow it (issue 37, 7b).

The batching decision is a pure function, tested here without HTTP, threads or torch."""

from __future__ import annotations

import functools

import pytest

from service.engine.batching.policy import BatchKey, Limits, next_batch
from service.engine.servables.base import TextCall
from tests.utils.batching import FakePending

KEY = BatchKey(TextCall("flash"), 512)
# Room for 32 rows by count, but only 1,024 padded tokens: two rows of 512.
LIMITS = Limits(max_batch_size=32, max_batch_tokens=1024, max_wait_s=0.010)


P = functools.partial(FakePending, key=KEY, longest=512, enqueued_at=1.0)


@pytest.mark.parametrize(
    ("rows", "longest"),
    [(2, 512), (1, 1000), (3, 300)],  # 1,024 tokens exactly; one more row over the cap either way
)
def test_a_batch_with_no_token_room_for_one_more_row_runs_at_once(rows: int, longest: int) -> None:
    pending = [P(n_rows=rows, longest=longest)]  # it arrived while a batch ran: not idle
    d = next_batch(pending, now=1.0, limits=LIMITS)
    assert d.batch == (0,) and d.wake_at is None


def test_a_batch_with_token_room_still_waits_for_company() -> None:
    pending = [P(n_rows=1, longest=500)]  # a second row of 500 tokens would fit (1,000)
    d = next_batch(pending, now=1.0, limits=LIMITS)
    assert d.batch == () and d.wake_at == pytest.approx(1.010)


def test_another_keys_request_behind_does_not_hide_a_full_token_budget() -> None:
    other = BatchKey(TextCall("full"), 512)
    pending = [P(n_rows=2, longest=512), P(key=other, n_rows=1, longest=10)]
    d = next_batch(pending, now=1.0, limits=LIMITS)
    assert d.batch == (0,)
