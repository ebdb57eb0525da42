"""vLLM's ``priority`` in the batching decision (a pure function): under a backlog a lower value
is taken first, while the fairness rules hold (one key per batch, the batch caps, and aging: a
request that has waited half its time to its deadline outranks every priority)."""

from __future__ import annotations

from service.engine.batching.policy import BatchKey, Limits, between_parts, next_batch
from service.engine.servables.base import TextCall
from tests.utils.batching import FakePending as P  # on FLASH unless told

FULL = BatchKey(TextCall("full"), 16)
ONE = Limits(max_batch_size=1, max_batch_tokens=10**6, max_wait_s=0.0)
FOUR = Limits(max_batch_size=4, max_batch_tokens=10**6, max_wait_s=0.0)


def test_a_lower_priority_value_is_taken_first_from_a_backlog() -> None:
    pending = [P(priority=0), P(priority=5), P(priority=-3), P(priority=1)]
    assert next_batch(pending, now=1.0, limits=ONE).batch == (2,)
    # Served one at a time, the backlog drains in priority order.
    order = []
    while pending:
        (i,) = next_batch(pending, now=1.0, limits=ONE).batch
        order.append(pending.pop(i).priority)
    assert order == [-3, 0, 1, 5]


def test_ties_keep_arrival_order_and_equal_priorities_batch_as_before() -> None:
    pending = [P(priority=2), P(priority=1), P(priority=1)]
    assert next_batch(pending, now=1.0, limits=ONE).batch == (1,)
    same = [P(priority=7), P(priority=7), P(priority=7)]
    assert next_batch(same, now=1.0, limits=FOUR).batch == (0, 1, 2)


def test_the_priority_head_picks_the_key_and_joiners_go_by_priority() -> None:
    pending = [P(key=FULL), P(priority=3), P(priority=-1), P(priority=1), P(key=FULL)]
    # Head: index 2 (flash); flash requests join by priority: 2, 3, 1; full ones wait.
    three = Limits(max_batch_size=3, max_batch_tokens=10**6, max_wait_s=0.0)
    assert next_batch(pending, now=1.0, limits=three).batch == (1, 2, 3)
    two = Limits(max_batch_size=2, max_batch_tokens=10**6, max_wait_s=0.0)
    assert next_batch(pending, now=1.0, limits=two).batch == (2, 3)


def test_aging_an_overdue_request_outranks_every_priority() -> None:
    old = P(priority=9, enqueued_at=0.0, deadline=10.0)
    new = P(priority=-9, enqueued_at=4.0, deadline=14.0)
    assert next_batch([old, new], now=4.9, limits=ONE).batch == (1,)  # waited 4.9 of 10
    assert next_batch([old, new], now=5.0, limits=ONE).batch == (0,)  # half its time: first


def test_batch_caps_still_apply_to_a_priority_head() -> None:
    pending = [P(n_rows=3), P(n_rows=3, priority=-1), P(n_rows=2, priority=-1)]
    # Rows cap 4: the head (3 rows) cannot take the other 3-row request but takes neither
    # out of priority order: the next by priority (index 2, 2 rows) would overflow too.
    assert next_batch(pending, now=1.0, limits=FOUR).batch == (1,)


def test_between_parts_the_waiting_batch_goes_by_priority() -> None:
    pending = [P(priority=4), P(priority=-2)]
    d = between_parts(pending, now=1.0, limits=ONE, parts_turn=False)
    assert d.batch == (1,)
