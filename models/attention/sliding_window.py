"""Exact sliding-window (local) attention in O(n·w): the local layers of ModernBERT.

Query ``i`` sees keys ``j`` with ``|i - j| <= window`` (and that are real tokens): the banded
attention of Longformer (Beltagy et al., "Longformer", 2020, section 3.1) that ModernBERT
(Warner et al., "Smarter, Better, Faster, Longer", 2024, section 2.1.2) alternates with global
layers. Transformers' own ModernBERT computes it as full attention under a band mask, O(n²);
here the queries are cut into blocks of ``B`` and each block attends, through the fused SDPA
kernel, only to the ``B + 2·window`` keys that can reach it. Every pair inside the band gets
exactly the score and softmax weight it would get in full attention, so the result is exact
(to float rounding), and cost grows linearly with length.

Dimension legend: ``b`` texts, ``h`` heads, ``n`` length, ``d`` head dim, ``w`` half-width,
``B`` query block, ``S = B + 2w`` keys per block, ``m = ceil(n / B)`` blocks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from models.attention.pricing import ELEMENTWISE, HEAD_MATMUL

MIN_BLOCK = 16  # below this, per-block overhead outweighs the keys a smaller block would save


def query_block(window: int) -> int:
    """Queries per block: the half-width itself, so each block reads ``3w`` keys (a third of
    them, on average, outside the band) in a few large batched products."""
    return max(window, MIN_BLOCK)


def is_banded(length: int, window: int) -> bool:
    """Whether a length is long enough for blocks to save work over one band-masked call."""
    return length > 2 * window + query_block(window)


def band_mask(length: int, window: int, device: torch.device) -> Tensor:
    """Boolean ``[n, n]``: True where ``|i - j| <= window``."""
    idx = torch.arange(length, device=device)
    return (idx[:, None] - idx[None, :]).abs() <= window


def _dense(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, window: int) -> Tensor:
    """Short inputs: one SDPA call under the ``[n, n]`` band mask."""
    mask = band_mask(q.shape[-2], window, q.device)[None, None]  # [1, 1, n, n]
    if key_padding_mask is not None:
        mask = mask & key_padding_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.where(mask.any(dim=-1, keepdim=True), out, 0.0)


def _blocks(x: Tensor, block: int, span: int, before: int) -> Tensor:
    """``[b, h, n, d] -> [b·m, h, span, d]``: block ``i`` holds rows ``i·B - before`` to
    ``i·B - before + span`` (zeros outside ``0..n-1``)."""
    b, h, n, d = x.shape
    m = math.ceil(n / block)
    after = m * block + span - block - before - n
    padded = F.pad(x, (0, 0, before, after))  # [b, h, before + n + after, d]
    windows = padded.unfold(2, span, block)  # [b, h, m, d, span]
    return windows.permute(0, 2, 1, 4, 3).reshape(b * m, h, span, d)


def sliding_window_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, window: int
) -> Tensor:
    """``[b, h, n, d]`` x3 -> ``[b, h, n, d]``: softmax attention where query ``i`` sees the real
    keys ``j`` with ``|i - j| <= window``; a query that sees no key (a padded position far past
    its text's end) returns zeros. ``key_padding_mask``: bool ``[b, n]``, True = real token."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    b, h, n, d = q.shape
    if not is_banded(n, window):
        return _dense(q, k, v, key_padding_mask, window)
    block = query_block(window)
    span = block + 2 * window
    m = math.ceil(n / block)
    qb = _blocks(q, block, block, 0)  # [b·m, h, B, d]
    kb, vb = _blocks(k, block, span, window), _blocks(v, block, span, window)  # [b·m, h, S, d]
    # Key j of block i sits at position i·B - w + j; query r at i·B + r: in the band iff
    # 0 <= j - r <= 2w. Keys outside the text (or padding) are invalid.
    offsets = (
        torch.arange(span, device=q.device)[None, :] - torch.arange(block, device=q.device)[:, None]
    )
    band = (offsets >= 0) & (offsets <= 2 * window)  # [B, S]
    real = (
        key_padding_mask
        if key_padding_mask is not None
        else torch.ones(b, n, dtype=torch.bool, device=q.device)
    )
    valid = F.pad(real, (window, m * block + span - block - window - n)).unfold(1, span, block)
    mask = band[None, None] & valid[:, :, None, :]  # [b, m, B, S]
    mask = mask.reshape(b * m, 1, block, span)
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask)
    out = torch.where(mask.any(dim=-1, keepdim=True), out, 0.0)  # [b·m, h, B, d]
    out = out.view(b, m, h, block, d).transpose(1, 2).reshape(b, h, m * block, d)
    return out[:, :, :n]


def keys_per_query(length: int, window: int) -> int:
    """Keys each query's scores are computed against (the band plus the block's slack)."""
    if not is_banded(length, window):
        return length
    return query_block(window) + 2 * window


def sliding_window_work(b: int, h: int, n: int, d: int, window: int) -> float:
    """Flop-equivalents (:mod:`models.attention.pricing`): the two per-head products over each
    query's key span, the fused softmax and the mask pass, plus the block copies of q, k, v."""
    scores = b * h * n * keys_per_query(n, window)
    copies = 0 if not is_banded(n, window) else 3 * b * h * n * d
    return HEAD_MATMUL * 2 * scores * d + ELEMENTWISE * (2 * scores + copies)


def sliding_window_bytes(b: int, h: int, n: int, d: int, window: int, itemsize: int) -> int:
    """Peak bytes of one call: the blocked copies of q (and the output, twice while it is
    reassembled) and of k and v over their ``S``-wide spans, and the boolean masks."""
    if not is_banded(n, window):
        # The band mask [n, n] (and its padded [b, 1, n, n] combination), output and its copy.
        return (b + 1) * n * n + 2 * b * h * n * d * itemsize
    block = query_block(window)
    span = keys_per_query(n, window)
    m = math.ceil(n / block)
    rows = b * h * m * block * d  # q blocks, output, reassembled output
    spans = 2 * b * h * m * span * d  # k and v blocks
    masks = 2 * b * m * block * span  # the band-and-valid mask and the padded validity
    return (3 * rows + spans) * itemsize + masks
