"""An additive score bias (MPNet's relative position bias): exact backends against a float64
reference, ProbSparse's active queries exact under it, and a clear refusal elsewhere."""

from __future__ import annotations

import math

import pytest
import torch

from models.attention import BACKENDS, AttentionError, attend, get_backend
from models.attention.probsparse import probsparse_attention


def _inputs(n: int = 40, b: int = 2, h: int = 3, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    bias = 2.0 * torch.randn(1, h, n, n, generator=g, dtype=torch.float64)
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[-1, n - n // 3 :] = False
    return q, k, v, bias, mask


def _reference(q, k, v, bias, mask):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    scores = scores.masked_fill(~mask[:, None, None, :], -torch.inf)
    return scores.softmax(dim=-1) @ v


@pytest.mark.parametrize("backend", ["full", "flash"])
def test_exact_backends_add_the_bias(backend):
    q, k, v, bias, mask = _inputs()
    out = attend(q, k, v, backend=backend, key_padding_mask=mask, attn_bias=bias)
    real = mask[:, None, :, None]
    ref = _reference(q, k, v, bias, mask)
    assert ((out - ref).abs() * real).max() < 1e-10
    unbiased = attend(q, k, v, backend=backend, key_padding_mask=mask)
    assert ((unbiased - ref).abs() * real).max() > 1e-2  # the bias matters at this scale


def test_probsparse_with_every_query_active_equals_biased_attention():
    q, k, v, bias, mask = _inputs(n=12)
    out = probsparse_attention(q, k, v, mask, factor=100, attn_bias=bias)
    ref = _reference(q, k, v, bias, mask)
    assert ((out - ref).abs() * mask[:, None, :, None]).max() < 1e-10


def test_probsparse_active_queries_are_exact_under_the_bias():
    """Queries that got exact attention match the biased reference row for row; the others hold
    the mean of the values."""
    q, k, v, bias, _ = _inputs(n=300, b=1)
    out = probsparse_attention(q, k, v, None, factor=2, attn_bias=bias)
    ref = _reference(q, k, v, bias, torch.ones(1, 300, dtype=torch.bool))
    lazy = v.mean(dim=-2, keepdim=True)
    exact_rows = (out - ref).abs().amax(-1) < 1e-10
    lazy_rows = (out - lazy).abs().amax(-1) < 1e-10
    assert bool((exact_rows | lazy_rows).all())
    active = exact_rows & ~lazy_rows  # [b, h, L]
    u = 2 * math.ceil(math.log(300))  # u = c * ceil(ln L) = 12 active queries in every head
    assert active.sum(-1).tolist() == [[u] * active.shape[1]]


def test_probsparse_measure_follows_the_bias():
    """A bias that makes some rows sharply peaked gets those rows picked as active."""
    n, h = 300, 1
    q, k, v, _, _ = _inputs(n=n, b=1, h=h)
    q, k = q * 0.01, k * 0.01  # near-uniform scores: without the bias no row stands out
    peaked = torch.arange(0, n, 10)
    bias = torch.zeros(1, h, n, n, dtype=torch.float64)
    bias[0, 0, peaked, :] = torch.randn(len(peaked), n, dtype=torch.float64) * 6.0
    out = probsparse_attention(q, k, v, None, factor=1, attn_bias=bias)
    ref = _reference(q, k, v, bias, torch.ones(1, n, dtype=torch.bool))
    exact_rows = ((out - ref).abs().amax(-1) < 1e-10)[0, 0]
    # u = ceil(ln 300) = 6 active queries, every one of them a peaked row.
    assert int(exact_rows.sum()) == int(exact_rows[peaked].sum()) == math.ceil(math.log(n)) == 6


@pytest.mark.parametrize(
    "backend", [b for b in BACKENDS if not get_backend(b).capabilities.score_bias]
)
def test_backends_without_bias_refuse_it_by_name(backend):
    q, k, v, bias, _ = _inputs()
    with pytest.raises(AttentionError, match="score bias"):
        attend(q.float(), k.float(), v.float(), backend=backend, attn_bias=bias.float())


def test_bias_of_the_wrong_shape_is_refused():
    q, k, v, bias, _ = _inputs()
    with pytest.raises(AttentionError, match="attn_bias"):
        attend(q, k, v, backend="full", attn_bias=bias[..., :-1])
