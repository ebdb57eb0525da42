"""flash's jagged (variable-length) path for padded batches: same numbers as the mask path on
the real tokens, zeros on the padded ones, and a clear refusal where it cannot run.

The fused variable-length kernel is CUDA-only (tests/gpu covers it); here the packing and
unpacking run through SDPA's math kernel, which takes nested tensors on CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend

from models.attention import AttentionError, attend, get_backend
from models.attention.base import InputSpec
from models.attention.flash import jagged_self_attention
from tests.attention_inputs import reference_attention, structured_qkv

# SDPA's math kernel turns our jagged tensors into the strided nested layout internally, and
# torch warns (once) that this layout is a prototype; the fused CUDA kernel does not.
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")


def _right_padded(lengths: list[int], n: int) -> torch.Tensor:
    return torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("lengths", [[37, 37], [37, 1, 20], [5, 37, 36, 12]])
def test_jagged_equals_reference_on_real_tokens(lengths):
    n = 37
    q, k, v = structured_qkv(len(lengths), 4, n, n, 32, seed=len(lengths))
    mask = _right_padded(lengths, n)
    got = jagged_self_attention(q, k, v, mask, [SDPBackend.MATH])
    ref = reference_attention(q, k, v, key_padding_mask=mask)
    real = mask[:, None, :, None]
    torch.testing.assert_close(got.double() * real, ref * real, atol=1e-5, rtol=1e-5)
    assert (got * ~real == 0).all(), "padded positions must come back as zeros"


def test_jagged_takes_any_mask_not_only_right_padding():
    # Real tokens gathered in order: a hole in the middle is just a shorter row.
    q, k, v = structured_qkv(2, 2, 16, 16, 16, seed=3)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[0, 4:9] = False
    got = jagged_self_attention(q, k, v, mask, [SDPBackend.MATH])
    ref = reference_attention(q, k, v, key_padding_mask=mask)
    real = mask[:, None, :, None]
    torch.testing.assert_close(got.double() * real, ref * real, atol=1e-5, rtol=1e-5)


def test_padding_option_is_validated_and_described():
    flash = get_backend("flash")
    assert flash.resolve_options(None) == {"padding": "mask"}
    assert flash.describe()["options"]["padding"]["enum"] == ["mask", "jagged"]
    q, k, v = structured_qkv(1, 2, 8, 8, 16)
    with pytest.raises(AttentionError, match="'mask', 'jagged'"):
        attend(q, k, v, backend="flash", padding="varlen")


def test_jagged_is_refused_on_cpu_with_the_reason():
    q, k, v = structured_qkv(1, 2, 8, 8, 16)
    with pytest.raises(AttentionError, match="padding='mask' on CPU"):
        attend(q, k, v, backend="flash", padding="jagged")
    cuda = InputSpec(lq=8, lk=8, head_dim=16, dtype=torch.bfloat16, device_type="cuda")
    assert get_backend("flash").unsupported_reasons(cuda, {"padding": "jagged"}) == []


def test_mask_path_is_unchanged_by_the_option():
    q, k, v = structured_qkv(2, 2, 24, 24, 16, seed=5)
    mask = _right_padded([24, 10], 24)
    default = attend(q, k, v, backend="flash", key_padding_mask=mask)
    spelled = attend(q, k, v, backend="flash", key_padding_mask=mask, padding="mask")
    assert torch.equal(default, spelled)
