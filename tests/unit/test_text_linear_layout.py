"""Float32 linear weights laid out [i, o] at prepack, and the MKL path for a few rows on one
thread (models.text.network.fused_linear): same values, same results as the eager layer."""

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


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/unit/conftest.py


@pytest.fixture(autouse=True)
def _own_rng() -> Iterator[None]:
    """model() seeds torch's global generator: give it back as it was."""
    with torch.random.fork_rng():
        yield


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(48, 96), nn.Linear(96, 48, bias=False))


@needs_onednn
def test_prepack_keeps_values_and_shape_in_the_new_layout():
    reference, packed = model(), model()
    fused_linear.prepack(packed)
    for old, new in zip(reference, packed, strict=True):
        assert new.weight.shape == old.weight.shape
        assert new.weight.stride() == (1, old.weight.shape[0])  # [i, o] storage
        assert torch.equal(new.weight, old.weight)
    fused_linear.prepack(packed)  # again: nothing changes
    assert packed[0].weight.stride() == (1, 96)


@needs_onednn
@pytest.mark.parametrize("rows", [1, fused_linear.MIN_ROWS, 27, fused_linear.MKL_MAX_ROWS, 300])
def test_every_row_count_matches_eager(rows):
    reference, packed = model(), model()
    fused_linear.prepack(packed)
    x, r = torch.randn(rows, 48), torch.randn(rows, 96)
    with torch.inference_mode():
        for old, new, inp, res in (
            (reference[0], packed[0], x, r),
            (reference[1], packed[1], r, x),
        ):
            assert torch.allclose(fused_linear.linear(inp, new), old(inp), atol=1e-5)
            got = fused_linear.residual_linear(res.clone(), inp, new)
            assert torch.allclose(got, res + old(inp), atol=1e-5)
        assert torch.allclose(
            fused_linear.linear_gelu(x, packed[0]), F.gelu(reference[0](x)), atol=1e-5
        )
