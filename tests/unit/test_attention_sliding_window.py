"""The banded sliding-window kernel against full attention under the same band mask."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from models.attention.full import full_attention
from models.attention.sliding_window import (
    band_mask,
    is_banded,
    sliding_window_attention,
    sliding_window_bytes,
    sliding_window_work,
)


@pytest.fixture(autouse=True)
def own_rng() -> Iterator[None]:
    """The seeds set here stay here: the global torch generator is restored after each test,
    so later tests do not depend on which of these ran before them."""
    with torch.random.fork_rng():
        yield


def _reference(q, k, v, key_padding_mask, window):
    """Full attention with the band as an additive -inf bias (the definition of the layer)."""
    n = q.shape[-2]
    bias = torch.zeros(n, n, dtype=q.dtype).masked_fill(~band_mask(n, window, q.device), -torch.inf)
    return full_attention(q, k, v, key_padding_mask, attn_bias=bias)


@pytest.mark.parametrize(
    ("n", "window"),
    [(50, 4), (37, 64), (200, 16), (301, 5), (1000, 64), (129, 0)],
)
def test_matches_band_masked_full_attention_with_padding(n: int, window: int) -> None:
    torch.manual_seed(n + window)
    b, h, d = 3, 2, 8
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    lengths = torch.tensor([n, max(1, n // 3), max(1, n - window - 3)])
    mask = torch.arange(n)[None, :] < lengths[:, None]
    out = sliding_window_attention(q, k, v, mask, window)
    ref = _reference(q, k, v, mask, window)
    real = mask[:, None, :, None]
    assert out.shape == q.shape
    assert not torch.isnan(out).any()
    assert (out - ref).abs().masked_fill(~real, 0).max() < 1e-10


def test_blocked_path_is_taken_and_exact_without_padding() -> None:
    torch.manual_seed(0)
    n, window = 700, 32
    assert is_banded(n, window)
    q, k, v = (torch.randn(2, 3, n, 16) for _ in range(3))
    out = sliding_window_attention(q, k, v, None, window)
    assert (out - _reference(q, k, v, None, window)).abs().max() < 1e-5


def test_far_keys_do_not_move_a_query() -> None:
    """Changing a key/value outside a query's band leaves that query's output untouched."""
    torch.manual_seed(1)
    n, window = 400, 10
    q, k, v = (torch.randn(1, 1, n, 8) for _ in range(3))
    before = sliding_window_attention(q, k, v, None, window)
    k2, v2 = k.clone(), v.clone()
    k2[..., 300:, :] += 5.0
    v2[..., 300:, :] -= 5.0
    after = sliding_window_attention(q, k2, v2, None, window)
    assert torch.equal(before[..., : 300 - window, :], after[..., : 300 - window, :])
    assert not torch.allclose(before[..., 300 - window :, :], after[..., 300 - window :, :])


def test_cost_grows_linearly_with_length() -> None:
    short = sliding_window_work(1, 12, 2048, 64, 64)
    long = sliding_window_work(1, 12, 8192, 64, 64)
    assert 3.9 < long / short < 4.1
    assert sliding_window_bytes(1, 12, 8192, 64, 64, 4) < 12 * 8192 * 8192  # far below n² scores


def test_negative_window_is_refused() -> None:
    q = torch.randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention(q, q, q, None, -1)
