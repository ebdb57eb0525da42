"""The attention bridge into transformers' classes: every mask transformers builds is read back
as what it means (causal, key padding, or an additive bias), and the exact backends then equal
transformers' own SDPA function on the same inputs."""

from __future__ import annotations

import pytest
import torch

from models.hf_forecast.bridge import _read_mask, attend_hf, backend_scope


class Layer(torch.nn.Module):
    def __init__(self, is_causal: bool) -> None:
        super().__init__()
        self.is_causal = is_causal


def _qkv(b: int = 2, h: int = 2, lq: int = 6, lk: int = 6, d: int = 8):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(b, h, n, d, generator=g) for n in (lq, lk, lk))


def _masks(b: int, lq: int, lk: int) -> dict[str, torch.Tensor]:
    keys = torch.ones(b, lk, dtype=torch.bool)
    keys[1, -2:] = False  # row 1: two padded keys
    tril = torch.ones(lq, lk, dtype=torch.bool).tril()
    odd = torch.rand(b, 1, lq, lk, generator=torch.Generator().manual_seed(1)) > 0.3
    odd[..., 0] = True  # every query sees a key
    return {
        "padding": keys[:, None, None, :].expand(b, 1, lq, lk),
        "causal": tril[None, None].expand(b, 1, lq, lk),
        "causal+padding": tril[None, None] & keys[:, None, None, :],
        "arbitrary": odd,
    }


def padding_of(mask: torch.Tensor) -> torch.Tensor | None:
    return _read_mask(mask, mask.shape[-2], mask.shape[-1])[1]


def test_masks_are_read_back_as_what_they_mean() -> None:
    masks = _masks(2, 6, 6)
    assert _read_mask(masks["causal"], 6, 6)[:2] == (True, None)
    causal, padding, bias = _read_mask(masks["padding"], 6, 6)
    assert not causal and bias is None and padding is not None
    assert padding.tolist() == [[True] * 6, [True] * 4 + [False] * 2]
    causal, padding, bias = _read_mask(masks["causal+padding"], 6, 6)
    assert causal and padding is not None and bias is None
    assert padding.tolist() == [[True] * 6, [True] * 4 + [False] * 2]
    causal, padding, bias = _read_mask(masks["arbitrary"], 6, 6)
    assert not causal and padding is None and bias is not None
    # Neither pattern: the mask itself, as 0 where a query attends and -inf where it may not.
    assert torch.equal(bias, torch.where(masks["arbitrary"], 0.0, float("-inf")))
    # An additive float mask (transformers' eager form) reads the same as the bool one.
    additive = torch.zeros(masks["padding"].shape).masked_fill(~masks["padding"], -3.4e38)
    assert torch.equal(_read_mask(additive, 6, 6)[1], padding_of(masks["padding"]))


@pytest.mark.parametrize("backend", ["full", "flash"])
@pytest.mark.parametrize(
    "kind", ["none-causal", "none", "padding", "causal", "causal+padding", "arbitrary"]
)
def test_exact_backends_equal_transformers_sdpa(kind: str, backend: str) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = _qkv()
    layer = Layer(is_causal=kind == "none-causal")
    mask = None if kind.startswith("none") else _masks(2, 6, 6)[kind]
    want, _ = sdpa_attention_forward(layer, q, k, v, mask, scaling=0.3)
    with backend_scope(backend) as scope:
        got, _ = attend_hf(layer, q, k, v, mask, scaling=0.3)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    assert list(scope.layers.values()) == [backend]


def test_a_layer_the_backend_cannot_run_falls_back_to_exact_and_says_why() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = _qkv()
    layer = Layer(is_causal=True)
    want, _ = sdpa_attention_forward(layer, q, k, v, None)
    with backend_scope("nystrom") as scope:
        got, _ = attend_hf(layer, q, k, v, None)
    assert torch.allclose(got, want, atol=1e-5)
    assert list(scope.layers.values()) == ["flash"]
    assert "causal" in next(iter(scope.reasons.values()))


def test_outside_a_scope_it_is_exact_attention() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = _qkv(lq=3, lk=7)
    layer = Layer(is_causal=False)
    want, _ = sdpa_attention_forward(layer, q, k, v, None)
    got, _ = attend_hf(layer, q, k, v, None)
    assert torch.allclose(got, want, atol=1e-5)
