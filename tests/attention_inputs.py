"""Shared inputs and the float64 reference for the attention tests and benchmarks."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def reference_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, causal: bool = False
) -> Tensor:
    """Exact softmax attention in float64, written independently of the backends."""
    q, k, v = q.double(), k.double(), v.double()
    lq, lk = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = torch.ones(q.shape[0], 1, lq, lk, dtype=torch.bool)
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    if causal:
        allowed = allowed & (torch.arange(lk)[None, :] <= torch.arange(lq)[:, None])
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for i in range(lq):
            keys = allowed[b, 0, i].nonzero().flatten()
            if len(keys):
                w = torch.softmax(scores[b, :, i, keys], dim=-1)  # [h, n]
                out[b, :, i] = torch.einsum("hn,hnd->hd", w, v[b, :, keys])
    return out


def structured_qkv(
    b: int, h: int, lq: int, lk: int, d: int, scale: float = 1.0, rank: int = 8, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """q, k from a shared low-rank latent plus noise: peaked, non-uniform softmax rows, like
    trained attention, rather than i.i.d. noise whose attention is close to uniform."""
    g = torch.Generator().manual_seed(seed)
    wq = torch.randn(rank, d, generator=g) / math.sqrt(rank)
    wk = torch.randn(rank, d, generator=g) / math.sqrt(rank)
    zq = torch.randn(b, h, lq, rank, generator=g)
    zk = torch.randn(b, h, lk, rank, generator=g)
    q = (zq @ wq + 0.1 * torch.randn(b, h, lq, d, generator=g)) * scale
    k = (zk @ wk + 0.1 * torch.randn(b, h, lk, d, generator=g)) * scale
    v = torch.randn(b, h, lk, d, generator=g)
    return q, k, v


def relative_error(out: Tensor, exact: Tensor, rows: Tensor | None = None) -> float:
    """Mean over rows of ||y − y_exact|| / ||y_exact|| (rows: optional bool [b, Lq] to keep)."""
    per_row = (out.double() - exact.double()).norm(dim=-1) / exact.double().norm(dim=-1)
    if rows is not None:
        per_row = per_row[rows[:, None, :].expand_as(per_row)]
    return float(per_row.mean())
