"""Approximate backends: bounded error against exact attention, falling as the budget grows.

Bounds are measured values (see the commit that set them) plus ~15 % slack; the inputs are
`structured_qkv`, whose softmax rows are peaked rather than uniform, and every approximation
must also beat the trivial "mean of the values" answer on them.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from models.attention import BACKENDS, attend, get_backend
from models.attention.performer import _feature_maps
from tests.attention_inputs import reference_attention, relative_error, structured_qkv

B, H, L, D = 2, 4, 512, 32

# backend -> (input scale, option, budgets in rising order, measured-error bound at defaults)
CASES = {
    "performer": (0.5, "num_features", (32, 128, 512), 0.25),
    "nystrom": (0.8, "num_landmarks", (16, 32, 64, 128), 0.37),
    "probsparse": (0.8, "factor", (1, 5, 10, 20), 0.55),
}


def _exact_case(scale: float):
    q, k, v = structured_qkv(B, H, L, L, D, scale=scale)
    exact = attend(q.double(), k.double(), v.double(), backend="full")
    return q, k, v, exact


@pytest.mark.parametrize("backend", CASES)
def test_error_at_defaults_is_bounded_and_beats_the_mean(backend):
    scale, _, _, bound = CASES[backend]
    q, k, v, exact = _exact_case(scale)
    err = relative_error(attend(q, k, v, backend=backend), exact)
    baseline = relative_error(v.mean(dim=-2, keepdim=True).expand_as(v), exact)
    assert err <= bound, f"{backend}: relative error {err:.3f} > {bound}"
    assert err < baseline, f"{backend}: {err:.3f} is no better than the mean of V ({baseline:.3f})"


@pytest.mark.parametrize("backend", CASES)
def test_error_falls_as_budget_grows(backend):
    scale, option, budgets, _ = CASES[backend]
    q, k, v, exact = _exact_case(scale)
    errors = [
        relative_error(attend(q, k, v, backend=backend, **{option: n}), exact) for n in budgets
    ]
    assert all(a > b for a, b in itertools.pairwise(errors)), dict(
        zip(budgets, errors, strict=True)
    )


def test_probsparse_equals_full_when_every_query_is_active():
    q, k, v = structured_qkv(2, 2, 12, 12, 16)  # u = 5·ceil(ln 12) = 15 >= 12
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 8:] = False
    for causal in (False, True):
        got = attend(q, k, v, backend="probsparse", key_padding_mask=mask, causal=causal)
        want = attend(q, k, v, backend="full", key_padding_mask=mask, causal=causal)
        assert torch.equal(got, want)


def test_probsparse_lazy_causal_queries_get_the_running_mean():
    """With factor 1 exactly u = ceil(ln 400) = 6 queries are active and get exact causal
    softmax; every other query is lazy and gets the mean of v[:i+1]."""
    q, k, v = structured_qkv(1, 1, 400, 400, 16)
    out = attend(q, k, v, backend="probsparse", causal=True, factor=1)
    running_mean = v.cumsum(dim=2) / torch.arange(1, 401).view(1, 1, 400, 1)
    exact = reference_attention(q, k, v, causal=True).float()
    lazy = torch.isclose(out, running_mean, atol=1e-5).all(dim=-1)
    active = torch.isclose(out, exact, atol=1e-5).all(dim=-1) & ~lazy
    assert bool((lazy | active).all()), "a query is neither lazy nor exact"
    assert int(active.sum()) == math.ceil(math.log(400)) == 6
    assert int(lazy.sum()) == 400 - 6


def test_nystrom_is_exact_for_short_rows_in_a_long_batch():
    q, k, v = structured_qkv(2, 2, 200, 200, 16, scale=0.8)
    mask = torch.ones(2, 200, dtype=torch.bool)
    mask[1, 50:] = False  # 50 real keys <= 64 landmarks: exact for this row
    got = attend(q, k, v, backend="nystrom", key_padding_mask=mask)
    want = attend(q, k, v, backend="full", key_padding_mask=mask)
    assert torch.allclose(got[1, :, :50], want[1, :, :50], atol=1e-5)
    assert not torch.allclose(got[0], want[0], atol=1e-3)  # long row: approximated
    short = attend(q[:, :, :40], k[:, :, :40], v[:, :, :40], backend="nystrom")
    assert torch.allclose(short, attend(q[:, :, :40], k[:, :, :40], v[:, :, :40]), atol=1e-6)


def test_performer_causal_prefix_sums_match_the_quadratic_form():
    """Chunked prefix sums (chunks of 256) equal the masked O(L²) linear-attention formula."""
    q, k, v = structured_qkv(1, 2, 600, 600, 16, scale=0.5)
    phi_q, phi_k = _feature_maps(q, k, None, 64)
    weights = (phi_q @ phi_k.transpose(-1, -2)).tril()
    expected = (weights @ v) / weights.sum(dim=-1, keepdim=True)
    got = attend(q, k, v, backend="performer", causal=True, num_features=64)
    assert torch.allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_are_differentiable(backend):
    """Models train through `attend`: gradients reach q, k and v and are finite."""
    q, k, v = (t.requires_grad_() for t in structured_qkv(1, 2, 96, 96, 16, scale=0.8))
    causal = get_backend(backend).capabilities.causal
    attend(q, k, v, backend=backend, causal=causal).square().sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert float(v.grad.abs().sum()) > 0
