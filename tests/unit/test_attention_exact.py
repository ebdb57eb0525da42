"""`full` and `flash` against an independent float64 reference; shared invariants of all backends."""

from __future__ import annotations

import pytest
import torch

from models.attention import BACKENDS, attend, get_backend
from tests.attention_inputs import reference_attention, relative_error

EXACT = ("full", "flash")
SHAPES = [(37, 37), (19, 53), (53, 19), (1, 1), (1, 40)]  # odd lengths, Lq != Lk, length 1


def _inputs(lq: int, lk: int, b: int = 2, h: int = 3, d: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, d, generator=g) * 1.5  # peaked rows, not near-uniform softmax
    k = torch.randn(b, h, lk, d, generator=g) * 1.5
    v = torch.randn(b, h, lk, d, generator=g)
    mask = torch.ones(b, lk, dtype=torch.bool)
    mask[1, max(1, lk - lk // 3) :] = False  # right padding on row 1
    return q, k, v, mask


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize(("lq", "lk"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_exact_backends_match_float64_reference(backend, lq, lk, causal, padded):
    q, k, v, mask = _inputs(lq, lk)
    mask = mask if padded else None
    out = attend(q, k, v, backend=backend, key_padding_mask=mask, causal=causal)
    expected = reference_attention(q, k, v, mask, causal)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), expected, atol=1e-5, rtol=0), (
        f"max abs diff {float((out.double() - expected).abs().max()):.2e}"
    )


@pytest.mark.parametrize("backend", EXACT)
def test_exact_backends_with_scattered_mask(backend):
    q, k, v, _ = _inputs(23, 31)
    mask = torch.rand(2, 31, generator=torch.Generator().manual_seed(3)) > 0.4
    out = attend(q, k, v, backend=backend, key_padding_mask=mask)
    assert torch.allclose(out.double(), reference_attention(q, k, v, mask), atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_padding_row_and_length_one_give_finite_zeros(backend):
    q, k, v, _ = _inputs(9, 9)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1] = False  # a row whose keys are all padding
    out = attend(q, k, v, backend=backend, key_padding_mask=mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    one = attend(q[:, :, :1], k[:, :, :1], v[:, :, :1], backend=backend)
    assert torch.allclose(one, v[:, :, :1], atol=1e-6)  # one key: the output is its value


@pytest.mark.parametrize("backend", BACKENDS)
def test_weights_sum_to_one(backend):
    """A constant value vector comes back unchanged: every backend's weights are normalised."""
    q, k, _, mask = _inputs(300, 300)
    v = torch.full((2, 3, 300, 16), 2.5)
    causal = get_backend(backend).capabilities.causal
    out = attend(q, k, v, backend=backend, key_padding_mask=mask, causal=causal)
    # Nyström's weights sum to one only up to the pseudo-inverse iteration's error.
    atol = 0.075 if backend == "nystrom" else 1e-4  # measured: 0.057 (2.3 %)
    assert torch.allclose(out, torch.full_like(out, 2.5), atol=atol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_runs_and_keeps_dtype(backend, dtype):
    q, k, v, mask = _inputs(130, 130)
    out = attend(q.to(dtype), k.to(dtype), v.to(dtype), backend=backend, key_padding_mask=mask)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    ref = attend(q, k, v, backend=backend, key_padding_mask=mask)
    # Mean relative row error: for ProbSparse a rounding can flip which queries are active.
    assert relative_error(out, ref) < 0.05
