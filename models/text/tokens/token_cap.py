"""Counting texts' tokens up to a cap: the step that judges a long_text windows request against
a compute limit before anything is prepared.

A text over the model's limit is cut into windows of ``limit`` tokens, so a request's texts
holding ``n`` tokens become at least ``n / limit`` rows
(:func:`~service.engine.batching.admission.window_token_cap` turns a compute limit into a cap on
tokens). Whether texts hold more than ``cap`` tokens while one of them is over the limit is
answered here reading about ``cap`` tokens' worth of text at most, however long the texts are:
first from lower bounds that need no tokenizing (:mod:`models.text.tokens.token_floor`), then from
growing prefixes, each token of which is one of the whole text's
(:mod:`models.text.tokens.bounded`). Counting stops as soon as the answer is known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from models.text.tokens.bounded import WHOLE, Ends

Floor = Callable[[str, int], int]  # (text, enough) -> a lower bound of its tokens


@dataclass(frozen=True)
class TokenCount:
    """What counting up to a cap found.

    Attributes:
        tokens: the tokens counted; a lower bound of what the texts hold when ``exceeded``
            (counting stopped there), their own tokens (special tokens left out) otherwise.
        cap: the cap counted up to.
        exceeded: the texts hold more than ``cap`` tokens while one of them is over the limit.
    """

    tokens: int
    cap: int
    exceeded: bool


def exceeds(counts: Sequence[int], cap: int, over: int) -> bool:
    """The cap's rule on per-text counts: more than ``cap`` tokens in all while one text holds
    more than ``over`` (so will be cut into windows; texts all within the limit are one row
    each, which the batcher prices as it does any request)."""
    return sum(counts) > cap and max(counts, default=0) > over


def count_up_to(
    ends: Ends, floor: Floor | None, texts: Sequence[str], cap: int, over: int
) -> TokenCount:
    """Count the tokens of ``texts`` (already prepared for the tokenizer: lowercased where it
    lowercases) up to ``cap``, under the rule of :func:`exceeds`.

    Args:
        ends: the tokenizer's prefix tokenizer (counts grow round by round).
        floor: the tokenizer's lower bound of a text's tokens (None: none is proven for it).
        over: tokens of its own past which a text is cut into windows (-1: any text counts).
    """
    # A floor is at most the UTF-8 bytes, at most 4 a character: shorter texts cannot pass it.
    if floor is not None and 4 * sum(map(len, texts)) > cap:
        floors = [floor(t, cap) for t in texts]
        if exceeds(floors, cap, over):
            return TokenCount(sum(floors), cap, True)
    counts: list[int] = []
    for parts in ends.rounds(texts, [WHOLE] * len(texts), cap=cap):
        counts = [p.exact for p in parts]
        if exceeds(counts, cap, over):
            return TokenCount(sum(counts), cap, True)
    return TokenCount(sum(counts), cap, False)
