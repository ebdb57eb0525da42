"""Truncation from either end (text-embeddings-inference's ``truncation_direction``)."""

from __future__ import annotations

import copy

import pytest

from models.errors import ModelInputError
from models.text import SentenceEncoder

LONG = " ".join(f"word{i}" for i in range(60))
LIMIT = 16


@pytest.fixture(scope="module")
def wide() -> SentenceEncoder:
    return SentenceEncoder.load()


@pytest.fixture(scope="module")
def narrow() -> SentenceEncoder:
    return SentenceEncoder.load(max_tokens=LIMIT)


def test_left_keeps_the_start_token_and_the_last_tokens(
    wide: SentenceEncoder, narrow: SentenceEncoder
) -> None:
    full = wide.tokenize([LONG])[0]
    assert len(full) > LIMIT
    left = narrow.tokenize([LONG], truncate=True, cut_start=True)[0]
    right = narrow.tokenize([LONG], truncate=True)[0]
    assert left == full[:1] + full[-LIMIT:-1][1:] + full[-1:]
    assert len(left) == LIMIT and left[-1] == full[-1]  # [SEP] stays last
    assert right == full[: LIMIT - 1] + full[-1:]
    # A text within the limit is untouched either way.
    short = narrow.tokenize(["two words"], truncate=True, cut_start=True)
    assert short == wide.tokenize(["two words"])


def test_left_keeps_the_prompt_in_front(wide: SentenceEncoder, narrow: SentenceEncoder) -> None:
    prompted_wide, prompted_narrow = copy.copy(wide), copy.copy(narrow)
    for encoder in (prompted_wide, prompted_narrow):
        encoder.prompts = {"query": "query: "}
    full = prompted_wide.tokenize([LONG], prompt_name="query")[0]
    head = wide.tokenizer.prompt_length("query: ")  # [CLS] query :
    assert head == 3
    left = prompted_narrow.tokenize([LONG], truncate=True, prompt_name="query", cut_start=True)[0]
    assert left[:head] == full[:head]
    assert left[head:] == full[-(LIMIT - head) :]
    assert len(left) == LIMIT


def test_a_prompt_that_fills_the_limit_is_refused(narrow: SentenceEncoder) -> None:
    encoder = copy.copy(narrow)
    encoder.prompts = {"long": "a long instruction " * 8}
    with pytest.raises(ModelInputError, match="prompt takes"):
        encoder.tokenize([LONG], truncate=True, prompt_name="long", cut_start=True)
