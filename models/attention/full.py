"""Exact softmax attention, materialised: the reference every other backend is measured against.

softmax(Q Kᵀ / √d) V  (Vaswani et al., "Attention Is All You Need", NeurIPS 2017, eq. 1).
Memory is O(b·h·Lq·Lk): this is the backend that stops fitting first.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from models.attention.base import Backend, Capabilities, visible_keys


def full_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]``; queries that see no key return zeros.
    ``attn_bias`` (broadcastable to ``[b,h,i,j]``) is added to the scaled scores."""
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * (1.0 / math.sqrt(q.shape[-1]))
    if attn_bias is not None:
        scores = scores + attn_bias
    mask = visible_keys(q.shape[-2], k.shape[-2], key_padding_mask, causal, q.device)
    if mask is None:
        return torch.einsum("bhij,bhjd->bhid", scores.softmax(dim=-1), v)
    # A finite fill instead of -inf: a row with no visible key then softmaxes to a uniform row
    # (not NaN), and is zeroed below.
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1) * mask.any(dim=-1, keepdim=True)
    return torch.einsum("bhij,bhjd->bhid", weights, v)


BACKEND = Backend(
    name="full",
    exact=True,
    summary="Exact softmax attention with the Lq x Lk score matrix materialised; the reference.",
    citation="Vaswani et al., Attention Is All You Need, NeurIPS 2017",
    kernel=full_attention,
    capabilities=Capabilities(score_bias=True),
)
