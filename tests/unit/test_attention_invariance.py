"""Determinism, batch invariance and masks, for every backend."""

from __future__ import annotations

import pytest
import torch

from models.attention import BACKENDS, attend, get_backend
from tests.attention_inputs import structured_qkv

CAUSAL_CAPABLE = [b for b in BACKENDS if get_backend(b).capabilities.causal]


def _case(causal: bool):
    return [(b, causal) for b in (CAUSAL_CAPABLE if causal else BACKENDS)]


CASES = _case(False) + _case(True)


@pytest.mark.parametrize(("backend", "causal"), CASES)
def test_same_input_same_output(backend, causal):
    q, k, v = structured_qkv(2, 2, 300, 300, 16, scale=0.8)
    first = attend(q, k, v, backend=backend, causal=causal)
    second = attend(q.clone(), k.clone(), v.clone(), backend=backend, causal=causal)
    assert torch.equal(first, second)


@pytest.mark.parametrize(("backend", "causal"), CASES)
def test_row_alone_equals_row_in_padded_batch(backend, causal):
    """A row gives the same result alone as batched with a longer row and padded after it."""
    q, k, v = structured_qkv(2, 2, 300, 300, 16, scale=0.8, seed=1)
    n = 211
    alone = attend(q[:1, :, :n], k[:1, :, :n], v[:1, :, :n], backend=backend, causal=causal)
    mask = torch.ones(2, 300, dtype=torch.bool)
    mask[0, n:] = False
    batched = attend(q, k, v, backend=backend, key_padding_mask=mask, causal=causal)
    assert torch.allclose(batched[0, :, :n], alone[0], atol=2e-5, rtol=1e-4), float(
        (batched[0, :, :n] - alone[0]).abs().max()
    )


@pytest.mark.parametrize(("backend", "causal"), CASES)
def test_padded_keys_have_no_influence(backend, causal):
    q, k, v = structured_qkv(2, 2, 257, 257, 16, scale=0.8, seed=2)
    mask = torch.rand(2, 257, generator=torch.Generator().manual_seed(5)) > 0.3
    out = attend(q, k, v, backend=backend, key_padding_mask=mask, causal=causal)
    k2, v2 = k.clone(), v.clone()
    k2[~mask[:, None, :].expand(2, 2, 257)] = 50.0  # wild values under the padding
    v2[~mask[:, None, :].expand(2, 2, 257)] = -1e4
    again = attend(q, k2, v2, backend=backend, key_padding_mask=mask, causal=causal)
    real_queries = mask[:, None, :, None].expand_as(out)
    assert torch.allclose(out[real_queries], again[real_queries], atol=1e-5)


CROSS_CAPABLE = [b for b in BACKENDS if get_backend(b).capabilities.cross_attention]


@pytest.mark.parametrize("backend", CROSS_CAPABLE)
def test_cross_attention_row_invariance(backend):
    """Lq != Lk: padding the keys of one row changes nothing for that row."""
    q, k, v = structured_qkv(2, 2, 90, 300, 16, scale=0.8, seed=3)
    alone = attend(q[:1], k[:1, :, :200], v[:1, :, :200], backend=backend)
    mask = torch.ones(2, 300, dtype=torch.bool)
    mask[0, 200:] = False
    batched = attend(q, k, v, backend=backend, key_padding_mask=mask)
    assert torch.allclose(batched[0], alone[0], atol=2e-5, rtol=1e-4)
