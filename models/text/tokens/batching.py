"""How a list of texts is cut into padded sub-batches: a pure function, tested on its own.

Texts are sorted by token count (longest first, as sentence-transformers' ``encode`` does by
characters) so each sub-batch holds similar lengths, and each sub-batch is padded only to its own
longest member, rounded up to ``pad_multiple`` so the attention kernels see few distinct shapes.
A sub-batch stops growing at ``max_batch_size`` texts or when its padded size
(texts x padded length) would pass ``max_batch_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SubBatch:
    """Texts run together: their indices in the caller's list and the padded length."""

    indices: tuple[int, ...]
    padded_length: int

    @property
    def padded_tokens(self) -> int:
        """Size of the attention block: texts x padded length."""
        return len(self.indices) * self.padded_length


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n``."""
    return -(-n // multiple) * multiple


def plan_batches(
    lengths: Sequence[int],
    max_batch_size: int = 32,
    max_batch_tokens: int | None = None,
    pad_multiple: int = 8,
) -> list[SubBatch]:
    """Group texts of the given token ``lengths`` into length-sorted, padded sub-batches.

    Every index appears in exactly one sub-batch. A text whose padded length alone exceeds
    ``max_batch_tokens`` runs on its own (it cannot be split).
    """
    if max_batch_size < 1 or pad_multiple < 1:
        raise ValueError("max_batch_size and pad_multiple must be >= 1")
    if max_batch_tokens is not None and max_batch_tokens < 1:
        raise ValueError("max_batch_tokens must be >= 1")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[SubBatch] = []
    current: list[int] = []
    padded = 0
    for i in order:
        if current:
            fits_size = len(current) < max_batch_size
            fits_tokens = (
                max_batch_tokens is None or (len(current) + 1) * padded <= max_batch_tokens
            )
            if fits_size and fits_tokens:
                current.append(i)
                continue
            batches.append(SubBatch(tuple(current), padded))
        # Longest first: the first text of a sub-batch fixes its padded length.
        current, padded = [i], round_up(max(lengths[i], 1), pad_multiple)
    if current:
        batches.append(SubBatch(tuple(current), padded))
    return batches
