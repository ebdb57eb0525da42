"""Skyformer: exact when the landmarks cover every point, error falling with landmarks, masks,
and agreement with the authors' implementation (pkuzengqi/Skyformer) for the Gaussian kernel.

The generic attention tests (exact/invariance/memory/work, parametrised over ``BACKENDS``) cover
it too; these are the checks particular to its method.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from models.attention import AttentionCall, attend, attention_bytes, attention_work
from models.attention.skyformer import skyformer_nystrom, uniform_landmarks
from tests.attention_inputs import reference_attention, relative_error, structured_qkv

FIXTURE = Path(__file__).parents[1] / "fixtures" / "skyformer_reference.json"


def test_landmarks_covering_every_query_and_key_give_exact_attention() -> None:
    """m = Lq + Lk segment means are the points themselves: C W⁺ Cᵀ reproduces the kernel, and
    the row normalisation then gives softmax attention (float64, a converged pseudo-inverse)."""
    q, k, v = structured_qkv(2, 2, 20, 28, 16, scale=0.8)
    q, k, v = q.double(), k.double(), v.double()
    out = skyformer_nystrom(
        q, k, v, num_landmarks=48, landmarks="segment_means", pinv_iterations=30
    )
    assert torch.allclose(out, reference_attention(q, k, v), atol=1e-9, rtol=0)


def test_covering_landmarks_with_padding_give_exact_attention() -> None:
    """A padded row has fewer real points than landmarks: its empty landmarks drop out, the
    rest are its real points, and its padded keys are out of every sum."""
    q, k, v = structured_qkv(2, 2, 24, 24, 16, scale=0.8, seed=4)
    q, k, v = q.double(), k.double(), v.double()
    real = torch.ones(2, 24, dtype=torch.bool)
    real[1, 17:] = False
    out = skyformer_nystrom(
        q, k, v, real, real, num_landmarks=48, landmarks="segment_means", pinv_iterations=30
    )
    exact = reference_attention(q, k, v, real)
    assert torch.allclose(out[0], exact[0], atol=1e-9, rtol=0)
    assert torch.allclose(out[1, :, :17], exact[1, :, :17], atol=1e-9, rtol=0)


# structured_qkv at the scale the Nyström tests use (peaked rows, as trained attention has);
# measured relative errors 0.545 / 0.417 / 0.264 / 0.213 (nystrom: 0.498 / 0.414 / 0.322 /
# 0.241), bounds ~15 % above.
LANDMARKS = (16, 32, 64, 128)
BOUNDS = (0.63, 0.48, 0.31, 0.25)


def test_error_falls_as_landmarks_grow_within_measured_bounds() -> None:
    q, k, v = structured_qkv(2, 4, 512, 512, 32, scale=0.8)
    exact = reference_attention(q, k, v)
    errors = [
        relative_error(attend(q, k, v, backend="skyformer", num_landmarks=m), exact)
        for m in LANDMARKS
    ]
    assert all(a > b for a, b in itertools.pairwise(errors)), errors
    assert all(e <= bound for e, bound in zip(errors, BOUNDS, strict=True)), errors
    mean_of_v = relative_error(v.mean(dim=-2, keepdim=True).expand_as(v), exact)
    assert errors[2] < 0.5 * mean_of_v  # the default beats the trivial answer by far


@pytest.mark.parametrize("landmarks", ["uniform", "segment_means"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_padded_row_equals_its_unpadded_self(kernel: str, landmarks: str) -> None:
    q, k, v = structured_qkv(2, 2, 300, 300, 16, scale=0.8, seed=6)
    options = {"kernel": kernel, "landmarks": landmarks, "num_landmarks": 32}
    n = 190
    alone = attend(q[1:, :, :n], k[1:, :, :n], v[1:, :, :n], backend="skyformer", **options)
    mask = torch.ones(2, 300, dtype=torch.bool)
    mask[1, n:] = False
    batched = attend(q, k, v, backend="skyformer", key_padding_mask=mask, **options)
    assert torch.allclose(batched[1, :, :n], alone[0], atol=1e-4, rtol=1e-4)


def test_a_row_does_not_depend_on_the_rows_batched_with_it() -> None:
    q, k, v = structured_qkv(3, 2, 200, 200, 16, scale=0.8, seed=7)
    together = attend(q, k, v, backend="skyformer", num_landmarks=32)
    for row in range(3):
        alone = attend(
            q[row : row + 1],
            k[row : row + 1],
            v[row : row + 1],
            backend="skyformer",
            num_landmarks=32,
        )
        assert torch.allclose(together[row], alone[0], atol=1e-5, rtol=1e-5)


def test_uniform_landmarks_are_one_fixed_draw_and_leave_the_global_generator_alone() -> None:
    x = torch.randn(2, 1, 30, 4)
    real = torch.tensor([[True] * 15, [True] * 9 + [False] * 6])
    state = torch.random.get_rng_state()
    first = uniform_landmarks(x[:, :, :15], x[:, :, 15:], real, real, 8)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, uniform_landmarks(x[:, :, :15], x[:, :, 15:], real, real, 8))
    # the first half among the row's real queries, the rest among its real keys (offset 15)
    assert bool((first[1, :4] < 9).all()) and bool(
        ((first[1, 4:] >= 15) & (first[1, 4:] < 24)).all()
    )


def test_rows_with_at_most_m_keys_get_exact_softmax_attention() -> None:
    """(The Gaussian kernel is Nyström at every length: tests/unit/test_skyformer_gaussian.py.)"""
    q, k, v = structured_qkv(2, 2, 100, 100, 16, seed=8)
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 30:] = False  # 30 real keys <= 32 landmarks
    out = attend(q, k, v, backend="skyformer", key_padding_mask=mask, num_landmarks=32)
    want = reference_attention(q[1:, :, :30], k[1:, :, :30], v[1:, :, :30])
    assert torch.allclose(out[1, :, :30].double(), want[0].double(), atol=1e-5)


def test_near_zero_denominators_stay_within_the_values() -> None:
    """Far-apart queries and keys make the approximate denominators tiny or negative: the
    output still lies between the values' least and greatest, as softmax attention's does."""
    q, k, v = structured_qkv(1, 2, 256, 256, 32, scale=1.5, seed=9)
    out = attend(q, k, v, backend="skyformer", num_landmarks=16)
    assert torch.isfinite(out).all()
    assert bool((out <= v.amax(dim=-2, keepdim=True) + 1e-6).all())
    assert bool((out >= v.amin(dim=-2, keepdim=True) - 1e-6).all())


def test_gaussian_form_agrees_with_the_authors_implementation() -> None:
    """Outputs of the authors' ``Skyformer`` module on seeded inputs with the same landmark
    positions (how the fixture was made: tests/fixtures/README.md); padded query rows, which
    the reference zeroes before the kernel, are not compared."""
    fixture = json.loads(FIXTURE.read_text())
    s = fixture["shape"]
    b, h, n, d, m = s["b"], s["h"], s["n"], s["d"], s["num_landmarks"]
    real = torch.arange(n)[None, :] < torch.tensor(fixture["real_tokens"])[:, None]
    for case in fixture["cases"]:
        gen = torch.Generator().manual_seed(case["seed"])
        q, k, v = (torch.randn(b, h, n, d, generator=gen) for _ in range(3))
        positions = uniform_landmarks(q, k, real, real, m)
        assert positions.tolist() == case["landmark_positions"]
        out = attend(
            q,
            k,
            v,
            backend="skyformer",
            key_padding_mask=real,
            num_landmarks=m,
            kernel="gaussian",
            landmarks="uniform",
            pinv_iterations=6,
        )
        reference = torch.tensor(case["output"])
        rows = real[:, None, :, None].expand_as(out)
        assert torch.allclose(out[rows], reference[rows], atol=1e-5, rtol=1e-5)


def test_cost_and_memory_grow_linearly_and_follow_the_landmarks() -> None:
    def call(n: int) -> AttentionCall:
        return AttentionCall(b=2, h=4, lq=n, lk=n, d=32)

    ratio = attention_work("skyformer", call(8192)) / attention_work("skyformer", call(4096))
    assert 1.9 < ratio < 2.3
    assert attention_work("skyformer", call(8192)) < attention_work("flash", call(8192)) / 5
    assert attention_bytes("skyformer", call(8192)) < attention_bytes("full", call(8192)) / 10
    few, many = ({"num_landmarks": m} for m in (32, 512))
    assert attention_work("skyformer", call(2048), many) > 4 * attention_work(
        "skyformer", call(2048), few
    )
    assert attention_bytes("skyformer", call(2048), many) > attention_bytes(
        "skyformer", call(2048), few
    )
    short = AttentionCall(1, 4, 60, 60, 16)  # at most m keys: exact attention
    assert attention_work("skyformer", short) == attention_work("full", short)
    assert attention_bytes("skyformer", short) == attention_bytes("full", short)
