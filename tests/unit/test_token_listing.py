"""TEI's ``/tokenize`` listing: at most ``limit`` tokens per answer, and texts far over it refused
from a count over growing prefixes, before the (several times slower) call with offsets runs."""

from __future__ import annotations

import pytest

from models.errors import ModelInputError
from models.text.folders.weights import model_dir
from models.text.tokens.tokenizer import TextTokenizer


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer(model_dir() / "tokenizer.json", 256)


def words(n: int) -> str:
    return " ".join(f"word{i % 10}" for i in range(n))  # two tokens each: "word", "##N"


def test_a_listing_within_the_limit_is_every_token(tokenizer: TextTokenizer) -> None:
    texts = [words(40), words(3)]
    listed = tokenizer.tokens(texts, limit=90)
    assert [len(t) for t in listed] == [82, 8]
    assert listed == tokenizer.tokens(texts)
    with pytest.raises(ModelInputError, match=r"hold 90 tokens.*at most 89"):
        tokenizer.tokens(texts, limit=89)


def test_texts_far_over_the_limit_are_refused_before_the_offsets_call(
    tokenizer: TextTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offsets_call(*args: object, **kwargs: object) -> None:
        raise AssertionError("the whole text was tokenised with offsets")

    monkeypatch.setattr(tokenizer._tokenizer, "encode_batch", offsets_call)
    with pytest.raises(ModelInputError, match=r"at least .* tokens.*at most 1000 tokens"):
        tokenizer.tokens([words(200_000)], limit=1000)
