"""The sub-batch planner of the text encoder: a pure function, no model needed."""

from __future__ import annotations

import random

import pytest

from models.text.tokens.batching import plan_batches, round_up


def _lengths(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 300) for _ in range(n)]


@pytest.mark.parametrize("max_batch_tokens", [None, 64, 1000, 8192])
@pytest.mark.parametrize("pad_multiple", [1, 8])
def test_every_text_once_sorted_and_padded_to_own_longest(max_batch_tokens, pad_multiple):
    lengths = _lengths(0, 200)
    batches = plan_batches(lengths, 32, max_batch_tokens, pad_multiple)
    seen = [i for b in batches for i in b.indices]
    assert sorted(seen) == list(range(len(lengths)))
    assert [lengths[i] for i in seen] == sorted(lengths, reverse=True)  # longest first
    for b in batches:
        longest = max(lengths[i] for i in b.indices)
        assert b.padded_length == round_up(longest, pad_multiple)  # own longest, rounded
        assert len(b.indices) <= 32
        if max_batch_tokens is not None and len(b.indices) > 1:
            assert b.padded_tokens <= max_batch_tokens
    # Greedy: a sub-batch closes only when the next text would break a cap (fewest sub-batches).
    for b in batches[:-1]:
        full = len(b.indices) == 32
        over = max_batch_tokens is not None and (len(b.indices) + 1) * b.padded_length > (
            max_batch_tokens
        )
        assert full or over, (len(b.indices), b.padded_length)


def test_batches_fill_up_to_the_size_cap():
    batches = plan_batches([10] * 70, max_batch_size=32)
    assert [len(b.indices) for b in batches] == [32, 32, 6]
    assert all(b.padded_length == 16 for b in batches)


def test_text_longer_than_token_cap_runs_alone():
    batches = plan_batches([300, 5, 5], max_batch_tokens=100)
    assert batches[0].indices == (0,)
    assert batches[1].indices == (1, 2) and batches[1].padded_length == 8


def test_ties_keep_caller_order_and_empty_input():
    assert plan_batches([4, 4, 4])[0].indices == (0, 1, 2)
    assert plan_batches([]) == []


@pytest.mark.parametrize(
    "kwargs", [{"max_batch_size": 0}, {"pad_multiple": 0}, {"max_batch_tokens": 0}]
)
def test_rejects_nonsense_limits(kwargs):
    with pytest.raises(ValueError):
        plan_batches([3], **kwargs)
