"""Exact softmax attention, materialised: the reference every other backend is measured against.

softmax(Q Kᵀ / √d) V  (Vaswani et al., "Attention Is All You Need", NeurIPS 2017, eq. 1).
Memory is O(b·h·Lq·Lk): this is the backend that stops fitting first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from models.attention.base import Backend, Capabilities, visible_keys
from models.attention.pricing import ELEMENTWISE, FLOAT32, HEAD_MATMUL, AttentionCall


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
    # Masked here rather than through base.masked_softmax: this frame's ``scores`` would keep the
    # unmasked [b,h,i,j] alive beside the masked copy (a third more peak memory, measured by
    # tests/unit/test_attention_memory.py); rebinding it lets the first go.
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1) * mask.any(dim=-1, keepdim=True)
    return torch.einsum("bhij,bhjd->bhid", weights, v)


def full_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """Peak bytes: ``einsum`` writes the scores; ``* 1/√d`` makes a second score matrix while
    the first is alive; softmax a third *if* a mask is applied first (``masked_fill`` copies,
    and the ``scores`` variable stays alive until the kernel returns). Then ``weights @ v``.

    Unmasked peak: 2 score matrices; masked (causal or padding): 3, plus the causal boolean
    ``[Lq, Lk]`` mask (``[b, 1, Lq, Lk]`` when padding is combined with it). Quadratic in
    length: the backend that stops fitting first.
    """
    e = call.itemsize
    soft = max(e, FLOAT32)  # autocast runs softmax (and what follows) in float32
    # masked: masked scores, softmax, softmax * any-visible; else: scores (scaled), softmax
    scores = call.scores * (e + soft + (soft if call.causal or call.padded else 0))
    if e < FLOAT32:
        scores += call.scores * e  # autocast casts the float32 weights back for ``@ v``
    mask = (call.b if call.padded else 1) * call.lq * call.lk if call.causal else 0
    return scores + mask + call.queries * e  # + output


def full_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """Flop-equivalents: ``q·kᵀ`` and ``weights·v`` over every pair (a causal mask still
    computes all of them), plus the scale, softmax (max, exp-sum, divide) and, when masked, the
    fill."""
    s = call.scores
    passes = 4 + (1 if call.causal or call.padded else 0)
    return HEAD_MATMUL * 2 * s * call.d + ELEMENTWISE * passes * s


BACKEND = Backend(
    name="full",
    order=1,
    exact=True,
    summary="Exact softmax attention with the Lq x Lk score matrix materialised; the reference.",
    citation="Vaswani et al., Attention Is All You Need, NeurIPS 2017",
    kernel=full_attention,
    memory=full_bytes,
    work=full_work,
    capabilities=Capabilities(score_bias=True),
)
