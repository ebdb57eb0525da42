"""Embeddings in fewer bytes: sentence-transformers' ``quantize_embeddings`` on tensors, with
fixed per-dimension ranges calibrated once per model.

Legend: ``n`` embeddings, ``d`` dimensions.

- ``int8`` / ``uint8`` (scalar quantization): each dimension's range ``[lo, hi]`` is cut into 255
  steps and a value becomes ``floor((x - lo) / step)``, clipped to 0..255 (uint8) or shifted by
  -128 (int8), as ``sentence_transformers.quantization.quantize_embeddings`` computes it.
- ``binary`` / ``ubinary``: one bit per dimension (``x > 0``), eight to a byte, most significant
  first (``numpy.packbits``); ``binary`` is the byte minus 128 as an int8, ``ubinary`` the byte.

The scalar ranges are not taken from the batch being quantized, which would make one text's
codes depend on the texts sent beside it (and leave a lone text with a zero range). They come
from :class:`Calibration`: the model's embeddings of a fixed corpus (:func:`calibration_texts`,
the shipped stdlib docstrings), computed once at load; shortened embeddings
(:mod:`models.text.matryoshka`) get the ranges of the corpus shortened the same way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from models.text.matryoshka import shorten
from models.text.quality.corpus import stdlib_docstrings

PRECISIONS = ("int8", "uint8", "binary", "ubinary")
SCALAR = ("int8", "uint8")
# 256 docstrings of 24 words (about 32 tokens) each: a range estimate close to that of far larger
# samples for MiniLM (clipping and dequantised cosine measured against 512 texts) at the cost of
# one small batch at load.
CALIBRATION_TEXTS = 256
CALIBRATION_WORDS = 24
_BIT_WEIGHTS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.int32)


def calibration_texts(count: int = CALIBRATION_TEXTS, words: int = CALIBRATION_WORDS) -> list[str]:
    """The first ``count`` docstrings of the shipped corpus (SHA-1 order: fixed), each cut to its
    first ``words`` words."""
    return [" ".join(doc.split()[:words]) for doc in stdlib_docstrings()[:count]]


def ranges_of(embeddings: Tensor) -> Tensor:
    """``[2, d]``: the smallest and the largest value of each dimension over ``[n, d]``."""
    return torch.stack((embeddings.amin(dim=0), embeddings.amax(dim=0)))


def quantize(embeddings: Tensor, precision: str, ranges: Tensor | None = None) -> Tensor:
    """``[n, d]`` float embeddings in ``precision``: ``[n, d]`` int8/uint8 codes for the scalar
    precisions (``ranges`` ``[2, d]`` required), ``[n, ceil(d / 8)]`` packed bytes for the
    binary ones. float32 arithmetic throughout, as sentence-transformers' (so codes agree
    exactly, floor included).

    Raises:
        ValueError: an unknown precision, or a scalar one without ``ranges``.
    """
    x = embeddings.float()
    if precision in SCALAR:
        if ranges is None:
            raise ValueError(f"{precision} quantization needs per-dimension ranges")
        starts = ranges[0].float()
        steps = (ranges[1].float() - starts) / 255
        steps = torch.where(steps == 0, torch.ones_like(steps), steps)  # a constant dimension
        codes = torch.clamp(torch.floor((x - starts) / steps), 0, 255)
        if precision == "uint8":
            return codes.to(torch.uint8)
        return (codes - 128).to(torch.int8)
    if precision in ("binary", "ubinary"):
        n, d = x.shape
        bits = F.pad((x > 0).to(torch.int32), (0, -d % 8))  # numpy.packbits pads with zeros
        packed = (bits.view(n, -1, 8) * _BIT_WEIGHTS).sum(dim=-1)  # [n, ceil(d / 8)], 0..255
        if precision == "ubinary":
            return packed.to(torch.uint8)
        return (packed - 128).to(torch.int8)
    raise ValueError(f"unknown precision {precision!r}; one of {', '.join(PRECISIONS)}")


class Calibration:
    """A model's embeddings of the calibration corpus, and the scalar ranges they give.

    Args:
        embeddings: ``[n, d]`` the model's pooled embeddings of :func:`calibration_texts`,
            *not* normalised (so the ranges of normalised and shortened embeddings can both be
            derived from them).
    """

    def __init__(self, embeddings: Tensor) -> None:
        self.embeddings = embeddings.float()
        self._ranges: dict[tuple[int | None, bool], Tensor] = {}

    def ranges(self, dimensions: int | None = None, normalize: bool = True) -> Tensor:
        """``[2, dimensions or d]`` ranges of the corpus embeddings as a request gets them:
        normalised or not, shortened to ``dimensions`` (then renormalised when ``normalize``).
        Worked out once per pair and kept."""
        key = (dimensions, normalize)
        found = self._ranges.get(key)
        if found is None:
            vectors = self.embeddings
            if normalize:
                vectors = F.normalize(vectors, p=2.0, dim=-1)
            if dimensions is not None:
                vectors = shorten(vectors, dimensions, normalize)
            found = self._ranges[key] = ranges_of(vectors)
        return found
