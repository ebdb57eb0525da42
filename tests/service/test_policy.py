"""The batching decision as a pure function: no HTTP, no threads, no torch."""

from __future__ import annotations

import pytest

from service.engine.batching.policy import (
    BatchKey,
    Limits,
    length_bucket,
    next_batch,
    part_rows,
    rows_within,
)
from service.engine.servables.base import TextCall
from tests.utils.batching import FLASH
from tests.utils.batching import FakePending as P  # on FLASH unless told

FULL = BatchKey(TextCall("full"), 16)
LIMITS = Limits(max_batch_size=8, max_batch_tokens=1024, max_wait_s=0.010)


def test_empty_queue_sleeps_until_arrival() -> None:
    d = next_batch([], now=1.0, limits=LIMITS)
    assert d.batch == () and d.wake_at is None


def test_waits_for_more_until_max_wait_then_runs() -> None:
    pending = [P(enqueued_at=1.0), P(enqueued_at=1.002)]
    early = next_batch(pending, now=1.005, limits=LIMITS)
    assert early.batch == ()
    assert early.wake_at == pytest.approx(1.010)
    late = next_batch(pending, now=1.010, limits=LIMITS)
    assert late.batch == (0, 1)


def test_full_batch_runs_without_waiting() -> None:
    pending = [P(n_rows=4), P(n_rows=4), P(n_rows=1)]
    d = next_batch(pending, now=0.0, limits=LIMITS)
    assert d.batch == (0, 1)  # 8 rows = max_batch_size; the third waits


def test_next_request_that_does_not_fit_makes_the_batch_full() -> None:
    pending = [P(n_rows=5), P(n_rows=5)]
    d = next_batch(pending, now=0.0, limits=LIMITS)
    assert d.batch == (0,)


def test_token_budget_counts_padding() -> None:
    # 2 rows x longest 400 = 800 fits 1024; adding a 3rd row of 400 -> 1200 does not.
    pending = [P(longest=400), P(longest=100), P(longest=400)]
    d = next_batch(pending, now=0.0, limits=LIMITS)
    assert d.batch == (0, 1)


def test_oversized_head_runs_alone() -> None:
    pending = [P(n_rows=20, longest=500), P()]
    d = next_batch(pending, now=0.0, limits=LIMITS)
    assert d.batch == (0,)


def test_only_the_heads_key_joins_and_order_is_kept() -> None:
    pending = [P(key=FULL), P(key=FLASH), P(key=FULL), P(key=FLASH, n_rows=2)]
    d = next_batch(pending, now=1.0, limits=LIMITS)
    assert d.batch == (0, 2)
    rest = [pending[1], pending[3]]
    assert next_batch(rest, now=1.0, limits=LIMITS).batch == (0, 1)


def test_different_options_variant_or_bucket_do_not_mix() -> None:
    keys = [
        BatchKey(TextCall("performer", (("num_features", 64),), True), 16),
        BatchKey(TextCall("performer", (("num_features", 128),), True), 16),
        BatchKey(TextCall("performer", (("num_features", 64),), False), 16),
        BatchKey(TextCall("performer", (("num_features", 64),), True), 32),
    ]
    pending = [P(key=k) for k in keys]
    assert next_batch(pending, now=1.0, limits=LIMITS).batch == (0,)


def test_expired_and_cancelled_are_reported_not_batched() -> None:
    pending = [P(deadline=0.5), P(cancelled=True), P(enqueued_at=0.0)]
    d = next_batch(pending, now=1.0, limits=LIMITS)
    assert d.expired == (0,)
    assert d.dropped == (1,)
    assert d.batch == (2,)


def test_wake_at_respects_earliest_deadline() -> None:
    pending = [P(enqueued_at=1.0, deadline=1.004)]
    d = next_batch(pending, now=1.001, limits=LIMITS)
    assert d.batch == () and d.wake_at == pytest.approx(1.004)


def test_after_a_batch_the_worker_waits_for_the_clients_it_just_answered() -> None:
    # The head has waited long, but the worker only just came free: give the clients of the
    # batch that just finished max_wait to send their next requests.
    pending = [P(enqueued_at=0.0)]
    d = next_batch(pending, now=5.001, limits=LIMITS, free_since=5.0)
    assert d.batch == () and d.wake_at == pytest.approx(5.010)
    assert next_batch(pending, now=5.010, limits=LIMITS, free_since=5.0).batch == (0,)
    # A full batch never waits.
    full = [P(n_rows=8, enqueued_at=0.0)]
    assert next_batch(full, now=5.001, limits=LIMITS, free_since=5.0).batch == (0,)
    # A worker idle for long: only the head's own wait counts.
    assert next_batch([P(enqueued_at=9.0)], now=9.010, limits=LIMITS, free_since=1.0).batch == (0,)


def test_a_request_that_finds_the_worker_idle_runs_at_once() -> None:
    # No batching delay for a lone client: neither max_wait nor the pause after a batch.
    idle = [P(enqueued_at=5.0, arrived_idle=True)]
    assert next_batch(idle, now=5.0, limits=LIMITS, free_since=4.999).batch == (0,)
    # Requests behind it (they arrived while it ran) gather for the next batch.
    busy = [P(enqueued_at=5.0), P(enqueued_at=5.001)]
    assert next_batch(busy, now=5.002, limits=LIMITS, free_since=5.002).batch == ()


def test_parts_of_a_lone_request_over_a_limit() -> None:
    limits = Limits(max_batch_size=8, max_batch_tokens=1024, max_wait_s=0.0)
    assert part_rows(5, 100, limits) == 5  # within every limit: one forward pass
    assert part_rows(20, 10, limits) == 8  # rows
    assert part_rows(20, 300, limits) == 3  # padded tokens: 3 x 300 <= 1024
    assert part_rows(2, 5000, limits) == 1  # one row over the token cap still runs, alone
    with_memory = Limits(8, 10**9, 0.0, max_batch_memory=250)
    assert part_rows(8, 10, with_memory, lambda n: 100 * n) == 2  # estimated bytes


def test_flush_runs_immediately() -> None:
    pending = [P(enqueued_at=1.0)]
    assert next_batch(pending, now=1.0, limits=LIMITS, flush=True).batch == (0,)


def test_batch_size_one_means_no_batching() -> None:
    limits = Limits(max_batch_size=1, max_batch_tokens=10_000, max_wait_s=0.0)
    pending = [P(), P(), P()]
    assert next_batch(pending, now=0.0, limits=limits).batch == (0,)


# ----------------------------------------------------------------------------- memory budget

MEMORY_LIMITS = Limits(
    max_batch_size=32, max_batch_tokens=10**9, max_wait_s=0.010, max_batch_memory=1000
)


def quadratic(key: BatchKey, rows: int, longest: int) -> int:
    """A stand-in model estimate: ``full`` grows with the square of the length, others linearly."""
    return rows * (longest * longest if key.backend == "full" else longest)


def test_memory_budget_caps_the_rows_and_the_capped_batch_runs_at_once() -> None:
    # full at length 10: 100 bytes a row, so 10 rows fill a 1000-byte budget.
    pending = [P(key=FULL, n_rows=3, enqueued_at=1.0) for _ in range(5)]
    d = next_batch(pending, now=1.0, limits=MEMORY_LIMITS, memory=quadratic)
    assert d.batch == (0, 1, 2)  # 9 rows = 900; a 4th request would make 1200
    # The same requests under a linear backend all fit (15 rows x 10 = 150): they wait to fill.
    linear = [P(key=FLASH, n_rows=3, enqueued_at=1.0) for _ in range(5)]
    assert next_batch(linear, now=1.0, limits=MEMORY_LIMITS, memory=quadratic).batch == ()
    assert next_batch(linear, now=1.1, limits=MEMORY_LIMITS, memory=quadratic).batch == (
        0, 1, 2, 3, 4,
    )  # fmt: skip


def test_a_batch_with_no_room_for_one_more_row_does_not_wait() -> None:
    pending = [P(key=FULL, n_rows=9, longest=10, enqueued_at=1.0)]  # 900: a 10th row is 1000
    assert next_batch(pending, now=1.0, limits=MEMORY_LIMITS, memory=quadratic).batch == ()
    pending = [P(key=FULL, n_rows=10, longest=10, enqueued_at=1.0)]  # 1000: no room left
    assert next_batch(pending, now=1.0, limits=MEMORY_LIMITS, memory=quadratic).batch == (0,)


def test_memory_is_priced_at_the_longest_row() -> None:
    # Two short requests fit; a long neighbour would pad both to its length (3 x 400 > 1000).
    pending = [P(key=FULL, longest=10), P(key=FULL, longest=10), P(key=FULL, longest=20)]
    d = next_batch(pending, now=1.0, limits=MEMORY_LIMITS, memory=quadratic)
    assert d.batch == (0, 1)


def test_a_head_over_the_budget_runs_alone_and_without_a_model_estimate_nothing_is_capped() -> None:
    pending = [P(key=FULL, n_rows=20, longest=10), P(key=FULL)]
    assert next_batch(pending, now=0.0, limits=MEMORY_LIMITS, memory=quadratic).batch == (0,)
    assert next_batch(pending, now=1.0, limits=MEMORY_LIMITS).batch == (0, 1)
    no_budget = Limits(32, 10**9, 0.010, max_batch_memory=None)
    assert next_batch(pending, now=1.0, limits=no_budget, memory=quadratic).batch == (0, 1)


@pytest.mark.parametrize(
    ("rows", "per_row", "budget", "expected"),
    [(32, 100, 1000, 10), (32, 100, 99, 1), (5, 100, 10**6, 5), (32, 100, 3200, 32), (1, 7, 1, 1)],
)
def test_rows_within(rows: int, per_row: int, budget: int, expected: int) -> None:
    assert rows_within(budget, rows, lambda n: n * per_row) == expected


@pytest.mark.parametrize(
    ("length", "bucket"), [(1, 16), (16, 16), (17, 32), (100, 128), (256, 256), (257, 512)]
)
def test_length_bucket(length: int, bucket: int) -> None:
    assert length_bucket(length) == bucket


# ----------------------------------------------------------------------------- compute budget

TIME_LIMITS = Limits(
    max_batch_size=32, max_batch_tokens=10**9, max_wait_s=0.010, max_request_seconds=1.0
)


def per_row_seconds(key: BatchKey, rows: int, longest: int) -> float:
    return 0.3 * rows  # a 1-second budget holds three rows


def test_no_batch_grows_past_the_compute_budget_and_a_capped_batch_runs_at_once() -> None:
    pending = [P(), P(n_rows=2), P(), P()]
    d = next_batch(pending, now=0.0, limits=TIME_LIMITS, seconds=per_row_seconds)
    assert d.batch == (0, 1)  # 0.9 s; a fourth row would be 1.2 s: full, so it runs now


def test_an_unmeasured_backend_and_no_budget_leave_batches_uncapped() -> None:
    pending = [P() for _ in range(5)]
    unmeasured = next_batch(pending, now=1.0, limits=TIME_LIMITS, seconds=lambda *_: None)
    assert unmeasured.batch == (0, 1, 2, 3, 4)
    no_budget = Limits(32, 10**9, 0.010)
    assert next_batch(pending, now=1.0, limits=no_budget, seconds=per_row_seconds).batch == (
        0,
        1,
        2,
        3,
        4,
    )
