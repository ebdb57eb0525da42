"""Texts longer than a model's limit, embedded whole: overlapping windows, pooled together.

    windowed = split_texts(encodings, limit=256, keep=0)   # rows to embed in one batch
    vectors = merge(embeddings_of(windowed.rows), windowed, normalize=True)

A text within the limit is one row, as always. A longer one is cut into windows of at most
``limit`` tokens, each wrapped in the model's own special tokens (``[CLS] … [SEP]``,
``<s> … </s>``) and starting with the prompt, if any; consecutive windows share
:data:`OVERLAP` of their tokens so no sentence is seen only cut in two. The windows' (unnormalised)
embeddings are averaged weighted by how many of the text's tokens each holds, then normalised as
the model does. This is the chunk-and-average scheme long-document retrieval uses when the
encoder's context is too short (e.g. "MaxP/FirstP/AvgP" passage aggregation in Dai & Callan,
"Deeper Text Understanding for IR with Contextual Neural Language Modeling", SIGIR 2019);
``benchmarks/text/long_text_retrieval.py`` measures it against truncation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from models.errors import ModelInputError

OVERLAP = 0.25  # share of a window's tokens repeated at the start of the next


@dataclass(frozen=True)
class Windowed:
    """Rows to embed and how they map back to texts.

    Attributes:
        rows: token ids per row (a whole text, or one window of it).
        owners: which text (index into the request) each row belongs to.
        weights: the text's own tokens in each row (special and prompt tokens excluded).
        texts: how many texts the rows came from.
    """

    rows: list[list[int]]
    owners: list[int]
    weights: list[int]
    texts: int


def _edges(special_mask: Sequence[int]) -> tuple[int, int]:
    """Special tokens at the start and at the end of one encoding."""
    lead = 0
    while lead < len(special_mask) and special_mask[lead]:
        lead += 1
    trail = 0
    while trail < len(special_mask) - lead and special_mask[len(special_mask) - 1 - trail]:
        trail += 1
    return lead, trail


def window_starts(length: int, width: int, overlap: float = OVERLAP) -> list[int]:
    """Where each window of ``width`` tokens starts in a body of ``length`` tokens: every
    ``width - overlap·width`` tokens until one reaches the end (the last may be shorter)."""
    stride = max(1, width - int(width * overlap))
    starts = [0]
    while starts[-1] + width < length:
        starts.append(starts[-1] + stride)
    return starts


def split_texts(
    encodings: Sequence[tuple[list[int], list[int]]],
    limit: int,
    keep: int = 0,
    overlap: float = OVERLAP,
) -> Windowed:
    """Rows for ``encodings`` (token ids and special-token mask of each whole text).

    Args:
        limit: most tokens per row, special tokens included.
        keep: tokens after the leading special tokens repeated on every window (the prompt).
        overlap: share of a window repeated in the next.

    Raises:
        ModelInputError: the special tokens and the prompt leave no room for text.
    """
    rows: list[list[int]] = []
    owners: list[int] = []
    weights: list[int] = []
    for index, (ids, special) in enumerate(encodings):
        lead, trail = _edges(special)
        head = list(ids[: lead + keep])
        tail = list(ids[len(ids) - trail :]) if trail else []
        body = list(ids[lead + keep : len(ids) - trail])
        if len(ids) <= limit:
            rows.append(list(ids))
            owners.append(index)
            weights.append(max(1, len(body)))
            continue
        width = limit - len(head) - len(tail)
        if width < 1:
            raise ModelInputError(
                f"input {index}: the prompt and special tokens take {len(head) + len(tail)} of "
                f"the model's {limit} tokens, leaving no room for text in a window"
            )
        for start in window_starts(len(body), width, overlap):
            piece = body[start : start + width]
            rows.append(head + piece + tail)
            owners.append(index)
            weights.append(len(piece))
    return Windowed(rows, owners, weights, len(encodings))


def merge(vectors: Tensor, windowed: Windowed, normalize: bool) -> Tensor:
    """``[rows, dim]`` unnormalised row embeddings -> ``[texts, dim]``: each text's rows averaged
    weighted by their token counts, then scaled to unit length when ``normalize``."""
    weights = torch.tensor(windowed.weights, dtype=vectors.dtype, device=vectors.device)
    owners = torch.tensor(windowed.owners, dtype=torch.long, device=vectors.device)
    total = vectors.new_zeros(windowed.texts, vectors.shape[-1])
    total.index_add_(0, owners, vectors * weights[:, None])
    mass = vectors.new_zeros(windowed.texts).index_add_(0, owners, weights)
    out = total / mass[:, None]
    return F.normalize(out, p=2.0, dim=-1) if normalize else out
