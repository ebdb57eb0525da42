"""The oneDNN-fused CPU linears of the text encoder agree with the eager expressions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.text.network import fused_linear

needs_onednn = pytest.mark.skipif(
    not fused_linear.ENABLED, reason="torch.ops.mkldnn._linear_pointwise unavailable here"
)


@pytest.fixture(autouse=True)
def own_rng() -> Iterator[None]:
    """The seeds set here stay here: the global torch generator is restored after each test,
    so later tests do not depend on which of these ran before them."""
    with torch.random.fork_rng():
        yield


@pytest.fixture
def layer() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(48, 96)


@needs_onednn
@pytest.mark.parametrize("rows", [fused_linear.MIN_ROWS, 700])
def test_fused_matches_eager(layer, rows):
    x = torch.randn(rows, 48)
    a = torch.randn(rows, 48)
    r = torch.randn(rows, 96)
    with torch.inference_mode():
        assert torch.allclose(fused_linear.linear(x, layer), layer(x), atol=1e-5)
        assert torch.allclose(fused_linear.linear_gelu(x, layer), F.gelu(layer(x)), atol=1e-5)
        expected = r + layer(a)
        got = fused_linear.residual_linear(r.clone(), a, layer)
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("enabled", [True, False])
def test_every_path_computes_the_same(layer, monkeypatch, enabled):
    """Small batches, autograd on, or the switch off: the eager path, same numbers."""
    monkeypatch.setattr(fused_linear, "ENABLED", enabled and fused_linear.ENABLED)
    x, a, r = torch.randn(5, 48), torch.randn(5, 48), torch.randn(5, 96)
    with torch.inference_mode():
        assert torch.allclose(fused_linear.linear_gelu(x, layer), F.gelu(layer(x)), atol=1e-6)
        expected = r + layer(a)
        assert torch.allclose(
            fused_linear.residual_linear(r.clone(), a, layer), expected, atol=1e-6
        )
    big = torch.randn(fused_linear.MIN_ROWS, 48)
    with torch.no_grad():  # grad mode off but not inference mode: either path, same numbers
        assert torch.allclose(fused_linear.linear(big, layer), layer(big), atol=1e-5)
