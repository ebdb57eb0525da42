"""Skyformer's Gaussian kernel is Nyström at every length, as the authors' code computes it
(pkuzengqi/Skyformer, ``src/models/attention_skyformer.py``: no exact path), so a model trained
with it sees the same function on both sides of length = ``num_landmarks``; and its memory
estimate follows the forward, which gathers the landmarks without stacking ``[Q; K]``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from models.attention import AttentionCall, attend, attention_bytes
from models.attention.skyformer import gaussian_attention
from models.profiling import allocated_peak
from tests.attention_inputs import relative_error, structured_qkv

M = 32
# Relative error to exact Gaussian attention at lengths 30..34 with 32 landmarks on these
# inputs: measured 0.16-0.21 (uniform) and 0.20-0.22 (segment_means); bound ~40 % above.
BOUND = 0.3


@pytest.mark.parametrize("landmarks", ["uniform", "segment_means"])
def test_error_to_exact_has_no_jump_at_length_equal_to_landmarks(landmarks: str) -> None:
    """Below, at and above ``m`` the output is the same approximation, close to exact
    attention; an exact path up to ``m`` would give error 0 there and a jump at ``m + 1``."""
    q, k, v = structured_qkv(2, 2, M + 2, M + 2, 16, seed=8)
    errors = []
    for n in range(M - 2, M + 3):
        qn, kn, vn = q[:, :, :n], k[:, :, :n], v[:, :, :n]
        out = attend(
            qn, kn, vn, backend="skyformer", num_landmarks=M, kernel="gaussian", landmarks=landmarks
        )
        errors.append(relative_error(out, gaussian_attention(qn, kn, vn)))
    assert max(errors) <= BOUND, errors
    assert min(errors) >= 0.5 * max(errors), errors  # no length is (near) exact


def test_a_padded_row_shorter_than_the_landmarks_is_nystrom_as_alone() -> None:
    """A row with fewer real keys than landmarks gets the same Nyström approximation batched
    with a longer row as alone (landmarks drawn with replacement among its real points)."""
    q, k, v = structured_qkv(2, 2, 100, 100, 16, seed=8)
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 30:] = False  # 30 real keys < 32 landmarks
    options: dict[str, Any] = {"num_landmarks": M, "kernel": "gaussian"}
    batched = attend(q, k, v, backend="skyformer", key_padding_mask=mask, **options)
    alone = attend(q[1:, :, :30], k[1:, :, :30], v[1:, :, :30], backend="skyformer", **options)
    assert torch.allclose(batched[1, :, :30], alone[0], atol=1e-5, rtol=1e-5)
    exact = gaussian_attention(q[1:, :, :30], k[1:, :, :30], v[1:, :, :30])
    assert 0.05 < relative_error(alone, exact) <= BOUND


def test_short_inputs_cost_nystrom_not_full_attention() -> None:
    short = AttentionCall(1, 4, 20, 20, 16)
    gaussian = {"kernel": "gaussian"}
    assert attention_bytes("skyformer", short, gaussian) != attention_bytes("full", short)
    assert attention_bytes("skyformer", short) == attention_bytes("full", short)  # softmax


# (b, h, Lq, Lk, d, m, padded). On the last, head dimension above m, the Gaussian kernel's
# busiest moment is its landmark selection: counting a stacked [Q; K] copy there, which uniform
# landmarks never build, overestimates it by far more than ten percent.
SHAPES = [
    (2, 4, 1025, 1025, 16, 64, False),
    (4, 4, 144, 1025, 16, 64, False),
    (2, 4, 1024, 1024, 32, 64, True),
    (2, 4, 1024, 1024, 64, 16, False),
]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("landmarks", ["uniform", "segment_means"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_memory_estimate_matches_the_measured_peak_within_ten_percent(
    kernel: str, landmarks: str, shape: tuple[int, int, int, int, int, int, bool]
) -> None:
    """Tighter than the generic 2x of tests/unit/test_attention_memory.py (same method: the
    allocator's events while one ``attend`` call runs, beyond its inputs)."""
    b, h, lq, lk, d, m, padded = shape
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, generator=gen) for n in (lq, lk, lk))
    mask = None
    if padded:
        # a row with fewer real keys than landmarks: softmax runs exact attention on it too,
        # the phase its estimate counts whenever a call is padded
        mask = torch.ones(b, lk, dtype=torch.bool)
        mask[1:, 48:] = False
    options: dict[str, Any] = {"kernel": kernel, "landmarks": landmarks, "num_landmarks": m}
    with torch.inference_mode():
        _, measured = allocated_peak(
            lambda: attend(q, k, v, backend="skyformer", key_padding_mask=mask, **options)
        )
    call = AttentionCall(b, h, lq, lk, d, padded=padded)
    ratio = attention_bytes("skyformer", call, options) / measured
    assert 0.9 <= ratio <= 1.1, f"estimate / measured = {ratio:.3f}"
