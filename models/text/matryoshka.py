"""Shorter embeddings (OpenAI's ``dimensions``, sentence-transformers' ``truncate_dim``), and
whether a model folder says its model was trained for them.

A Matryoshka model (Kusupati et al. 2022, https://arxiv.org/abs/2205.13147) is trained so that
the first ``k`` components of its embedding are an embedding on their own; any other model can
be shortened the same way, with a larger loss of quality. sentence-transformers shortens by
keeping the first ``k`` components and, with ``normalize_embeddings=True``, normalising after
(``SentenceTransformer.encode``: ``truncate_embeddings`` then ``normalize``): :func:`shorten`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor

# The losses that train for shortening; sentence-transformers' trainer tags the model card it
# writes with each loss it trained with ("loss:MatryoshkaLoss" in the README's front matter).
MATRYOSHKA_LOSSES = ("MatryoshkaLoss", "Matryoshka2dLoss")
CARD_FILE = "README.md"
CARD_BYTES = 1 << 20  # front matter and loss parameters sit at the top; a larger card is cut
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)
_DIMS = re.compile(r'"matryoshka_dims"\s*:\s*(\[[\d,\s]*\])')


def shorten(embeddings: Tensor, dimensions: int, normalize: bool) -> Tensor:
    """``[n, d]`` -> ``[n, dimensions]``: the first ``dimensions`` components of each embedding,
    scaled back to unit length when ``normalize`` (else as they are, as sentence-transformers'
    ``truncate_dim`` without ``normalize_embeddings``)."""
    short = embeddings[..., :dimensions]
    return F.normalize(short, p=2.0, dim=-1) if normalize else short


@dataclass(frozen=True)
class Shortening:
    """What a model folder says about shortening its embeddings.

    Attributes:
        trained: the model card names a Matryoshka loss.
        dims: the dimensions it was trained at (the loss's ``matryoshka_dims``), when the card
            lists them.
        evidence: what the decision rests on, for the model card.
    """

    trained: bool
    dims: tuple[int, ...] = ()
    evidence: str = ""

    def describe(self, dim: int) -> dict[str, Any]:
        """The card's ``dimensions`` entry: the accepted range and the training evidence."""
        return {
            "min": 1,
            "max": dim,
            "matryoshka": self.trained,
            "trained_dims": list(self.dims),
            "evidence": self.evidence,
        }


def read_shortening(folder: Path | None) -> Shortening:
    """Whether the model in ``folder`` was trained for shortening: its ``README.md`` (the model
    card sentence-transformers writes when it trains) tags a Matryoshka loss in its front matter
    (``loss:MatryoshkaLoss``), with the loss's ``matryoshka_dims`` when listed. A card that only
    mentions Matryoshka in prose does not count: every card sentence-transformers writes links
    its Matryoshka introduction. No readable card: not trained."""
    if folder is None:
        return Shortening(False, evidence="no model folder")
    path = folder / CARD_FILE
    try:
        with path.open("rb") as f:
            text = f.read(CARD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return Shortening(False, evidence=f"no readable {CARD_FILE} (model card)")
    front = _FRONT_MATTER.match(text)
    tags = set()
    if front:
        tags = {line.strip().lstrip("-").strip().strip("'\"") for line in front[1].splitlines()}
    losses = [loss for loss in MATRYOSHKA_LOSSES if f"loss:{loss}" in tags]
    if not losses:
        return Shortening(False, evidence=f"{CARD_FILE} names no Matryoshka loss")
    dims: tuple[int, ...] = ()
    found = _DIMS.search(text)
    if found:
        try:
            dims = tuple(int(d) for d in json.loads(found[1]))
        except ValueError:
            dims = ()
    return Shortening(True, dims, f"{CARD_FILE} tags loss:{losses[0]}")
