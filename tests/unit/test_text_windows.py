"""Texts over the limit embedded as overlapping windows: how they are cut, and how the windows'
embeddings are merged (``models/text/tokens/windows.py``)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from models.errors import ModelInputError
from models.text import SentenceEncoder
from models.text.tokens.windows import OVERLAP, Windowed, merge, split_texts, window_starts

CLS, SEP = 101, 102


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder.load(max_tokens=64)


def _encoding(body: list[int]) -> tuple[list[int], list[int]]:
    return [CLS, *body, SEP], [1, *[0] * len(body), 1]


@pytest.mark.parametrize(("length", "width"), [(10, 10), (11, 10), (1000, 62), (63, 62), (5, 62)])
def test_windows_cover_the_body_with_the_overlap(length: int, width: int) -> None:
    starts = window_starts(length, width)
    assert starts[0] == 0 and starts[-1] + width >= length  # every token is in a window
    assert all(b - a == width - int(width * OVERLAP) for a, b in itertools.pairwise(starts))
    assert len(starts) == 1 or starts[-2] + width < length  # no window past the one that ends it


def test_split_wraps_each_window_in_the_special_tokens_and_keeps_the_prompt() -> None:
    body = list(range(1000, 1300))  # 300 tokens of text
    prompt = [7, 8]
    ids, special = _encoding(prompt + body)
    split = split_texts([(ids, special), _encoding([5])], limit=64, keep=2)
    rows = [r for r, o in zip(split.rows, split.owners, strict=True) if o == 0]
    assert all(len(r) <= 64 for r in rows)
    assert all(r[:3] == [CLS, 7, 8] and r[-1] == SEP for r in rows)
    pieces = [r[3:-1] for r in rows]
    assert [len(p) for p in pieces] == split.weights[: len(rows)]
    seen = [t for p in pieces for t in p]
    assert sorted(set(seen)) == body  # every token, in windows that overlap
    assert len(seen) > len(body)
    assert split.rows[-1] == [CLS, 5, SEP] and split.owners[-1] == 1 and split.texts == 2


def test_a_prompt_that_leaves_no_room_is_refused() -> None:
    ids, special = _encoding(list(range(100)))
    with pytest.raises(ModelInputError, match="no room"):
        split_texts([(ids, special)], limit=10, keep=8)


def test_merge_is_the_token_weighted_mean_then_normalised() -> None:
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]])
    split = Windowed(rows=[[0]] * 3, owners=[0, 0, 1], weights=[3, 1, 9], texts=2)
    raw = merge(vectors, split, normalize=False)
    assert torch.allclose(raw, torch.tensor([[0.75, 0.25], [3.0, 4.0]]))
    unit = merge(vectors, split, normalize=True)
    assert torch.allclose(unit, F.normalize(raw, dim=-1))


def test_texts_within_the_limit_embed_exactly_as_without_windows(encoder) -> None:
    texts = ["a short text", "another one, a little longer than the first"]
    windowed, plain = encoder.encode(texts, long_text="windows"), encoder.encode(texts)
    assert torch.allclose(windowed, plain, atol=1e-6)  # normalised after merging: rounding only


def test_a_long_text_is_the_weighted_mean_of_its_windows(encoder) -> None:
    text = " ".join(f"word{i}" for i in range(150))  # several hundred tokens, limit 64
    split = encoder.split_windows([text])
    assert len(split.rows) >= 4 and all(len(r) <= 64 for r in split.rows)
    alone = torch.cat([encoder.embed([r], normalize=False) for r in split.rows])
    weights = torch.tensor(split.weights, dtype=torch.float32)[:, None]
    expected = F.normalize((alone * weights).sum(0) / weights.sum(), dim=-1)
    got = encoder.encode([text], long_text="windows")[0]
    assert torch.allclose(got, expected, atol=1e-5)
    assert F.cosine_similarity(got, encoder.encode([text], truncate=True)[0], dim=0) < 0.999
