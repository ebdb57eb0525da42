"""Counting tokens up to a cap (:mod:`models.text.tokens.token_cap`): the step that judges a
long_text windows request against the compute limit before it is prepared. Its answer is
compared with the tokenizers library's own count of every whole text, and it must stop reading
near the cap however long the texts are."""

from __future__ import annotations

from typing import Any

import pytest
from tokenizers import Tokenizer

from models.text.folders.weights import model_dir
from models.text.tokens.pairs import PairTokenizer
from models.text.tokens.token_cap import exceeds
from models.text.tokens.tokenizer import TextTokenizer

LIMIT = 64
WORDS = "the model reads long documents of text in overlapping windows "


@pytest.fixture(scope="module")
def reference() -> Tokenizer:
    """The tokenizers library's own tokenizer (no cuts, no floors): the whole texts' tokens."""
    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def own_tokens(reference: Tokenizer, texts: list[str]) -> list[int]:
    return [len(enc.ids) for enc in reference.encode_batch(texts, add_special_tokens=False)]


class Spy:
    """Records how many characters each batch call tokenises."""

    def __init__(self, encode: Any) -> None:
        self.encode = encode
        self.chars: list[int] = []

    def __call__(self, texts: list[str]) -> Any:
        self.chars.append(sum(map(len, texts)))
        return self.encode(texts)


@pytest.mark.parametrize(
    ("texts", "cap"),
    [
        ([WORDS * 9], 10),  # one text over the limit, over the cap
        ([WORDS * 9], 10_000),  # over the limit, within the cap
        ([WORDS] * 40, 100),  # over the cap in all, but no text over the limit: one row each
        ([WORDS, WORDS * 30], 200),  # a short text beside a long one, over the cap
        ([WORDS * 9, WORDS * 9], 150),  # each over the limit, over the cap only together
        (["short", "texts"], 1),
    ],
)
def test_the_answer_is_the_whole_texts_count_under_the_rule(
    reference: Tokenizer, texts: list[str], cap: int
) -> None:
    tok = TextTokenizer(model_dir() / "tokenizer.json", LIMIT)
    counted = tok.count_up_to(texts, cap)
    whole = own_tokens(reference, texts)
    over = LIMIT - tok.special_tokens()
    assert counted.exceeded == exceeds(whole, cap, over)
    assert counted.cap == cap
    if counted.exceeded:
        assert cap < counted.tokens <= sum(whole)  # an honest "at least"
    else:
        assert counted.tokens == sum(whole)  # every token read when within the cap


def test_counting_stops_near_the_cap_however_long_the_text() -> None:
    tok = TextTokenizer(model_dir() / "tokenizer.json", LIMIT)
    text = WORDS * 40_000  # 2.5 MB, about 400,000 tokens
    spy = Spy(tok._ends._encode)
    tok._ends._encode = spy
    tok._floor = None  # the prefixes' count, not the floor, is what this test measures
    counted = tok.count_up_to([text], 2_000)
    assert counted.exceeded and counted.tokens > 2_000
    assert sum(spy.chars) < 100_000, spy.chars


def test_a_floor_over_the_cap_answers_without_tokenising(reference: Tokenizer) -> None:
    tok = TextTokenizer(model_dir() / "tokenizer.json", LIMIT)
    if tok._floor is None:
        pytest.skip("no token floor proven for this tokenizer")
    text = WORDS * 40_000
    spy = Spy(tok._ends._encode)
    tok._ends._encode = spy
    counted = tok.count_up_to([text], 2_000)
    assert counted.exceeded and spy.chars == []
    assert 2_000 < counted.tokens <= own_tokens(reference, [text])[0]


def test_the_windows_refusal_keeps_its_exception_on_top_of_the_count() -> None:
    # with_special_mask(max_tokens=) raises exactly when the count says the cap is passed.
    tok = PairTokenizer(model_dir() / "tokenizer.json", LIMIT)
    texts = [WORDS * 30]
    assert tok.count_up_to(texts, 200).exceeded
    assert not tok.count_up_to(texts, 10_000).exceeded
    assert tok.with_special_mask(texts, max_tokens=10_000) == tok.with_special_mask(texts)


def test_documents_are_counted_beside_their_queries(reference: Tokenizer) -> None:
    tok = PairTokenizer(model_dir() / "tokenizer.json", LIMIT)
    pairs = [("a query", WORDS * 30), ("another query", WORDS)]
    docs = own_tokens(reference, [d for _, d in pairs])
    room = LIMIT - int(reference.num_special_tokens_to_add(True))
    for cap in (50, 300, 10_000):
        counted = tok.count_documents_up_to(pairs, cap)
        assert counted.exceeded == exceeds(docs, cap, room)
    with pytest.raises(Exception, match="query-document pairs only"):
        tok.count_documents_up_to(["a text alone"], 10)  # type: ignore[list-item]
