"""Per-backend memory estimates against the peak the torch allocator really reaches (CPU).

The measured peak is the running maximum of the profiler's allocator events while one
``attend`` call runs (:mod:`models.profiling`), beyond its inputs; ``q``, ``k``, ``v`` are
head-split views of ``[b, L, h·d]`` projections, as the models pass them. The stated factors:
``full`` (the one the budget exists for) within 15 %, every other backend within 2x either way.
"""

from __future__ import annotations

import pytest
import torch

from models.attention import (
    BACKENDS,
    AttentionCall,
    AttentionError,
    InputSpec,
    attend,
    attention_bytes,
    get_backend,
)
from models.profiling import allocated_peak

pytestmark = pytest.mark.usefixtures("one_thread")

FACTOR = {"full": (0.85, 1.15)}
DEFAULT_FACTOR = (0.5, 2.0)

# (b, h, Lq, Lk, d, causal, padded): Informer-long encoder / decoder self / cross attention,
# and a padded text batch (MiniLM: 12 heads of 32).
SHAPES = [
    (2, 4, 1025, 1025, 16, False, False),
    (4, 4, 144, 144, 16, True, False),
    (4, 4, 144, 1025, 16, False, False),
    (8, 12, 256, 256, 32, False, True),
]


def _inputs(
    b: int, h: int, lq: int, lk: int, d: int, padded: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(0)

    def heads(n: int) -> torch.Tensor:  # a projection's head-split view: [b, h, n, d]
        return torch.randn(b, n, h * d, generator=gen).view(b, n, h, d).transpose(1, 2)

    mask = None
    if padded:
        lengths = torch.randint(lk // 2, lk + 1, (b,), generator=gen)
        lengths[0] = lk
        mask = torch.arange(lk)[None, :] < lengths[:, None]
    return heads(lq), heads(lk), heads(lk), mask


def _supported(backend: str, lq: int, lk: int, causal: bool) -> bool:
    spec = InputSpec(
        lq=lq, lk=lk, head_dim=16, dtype=torch.float32, device_type="cpu", causal=causal
    )
    return not get_backend(backend).unsupported_reasons(spec)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_prices_a_call(backend: str) -> None:
    assert attention_bytes(backend, AttentionCall(2, 4, 300, 300, 16)) > 0


# Only the inputs each backend runs (nystrom has no causal form; the model plan uses full there).
CASES = [
    (backend, shape)
    for backend in BACKENDS
    for shape in SHAPES
    if _supported(backend, shape[2], shape[3], shape[5])
]


@pytest.mark.parametrize(
    ("backend", "shape"),
    CASES,
    ids=[f"{b}-" + "x".join(map(str, s[:5])) + str(s[5:]) for b, s in CASES],
)
def test_estimate_is_within_its_factor_of_the_measured_peak(
    backend: str, shape: tuple[int, int, int, int, int, bool, bool]
) -> None:
    b, h, lq, lk, d, causal, padded = shape
    q, k, v, mask = _inputs(b, h, lq, lk, d, padded)
    with torch.inference_mode():
        _, measured = allocated_peak(
            lambda: attend(q, k, v, backend=backend, key_padding_mask=mask, causal=causal)
        )
    estimate = attention_bytes(backend, AttentionCall(b, h, lq, lk, d, 4, causal, padded))
    low, high = FACTOR.get(backend, DEFAULT_FACTOR)
    ratio = estimate / measured
    assert low <= ratio <= high, (
        f"{backend}: estimate {estimate / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB"
    )


def test_full_grows_with_the_square_of_the_length_and_flash_linearly() -> None:
    short, long = AttentionCall(32, 4, 1025, 1025, 16), AttentionCall(32, 4, 2049, 2049, 16)
    full_ratio = attention_bytes("full", long) / attention_bytes("full", short)
    flash_ratio = attention_bytes("flash", long) / attention_bytes("flash", short)
    assert 3.8 < full_ratio < 4.1
    assert flash_ratio < 2.1
    # The burst: 32 windows x 4 heads x 2049² float32 is ~2.1 GB per score matrix,
    # and unmasked full attention holds two of them.
    assert attention_bytes("full", long) == pytest.approx(2 * 32 * 4 * 2049**2 * 4, rel=0.01)
    for linear in ("flash", "performer", "nystrom", "probsparse"):
        assert attention_bytes(linear, long) < attention_bytes("full", long) / 10, linear


def test_options_change_the_estimate_and_invalid_ones_are_refused() -> None:
    call = AttentionCall(4, 4, 2049, 2049, 16)
    few = attention_bytes("performer", call, {"num_features": 16})
    many = attention_bytes("performer", call, {"num_features": 512})
    assert many > 4 * few
    # nystrom with at least as many landmarks as keys is exact full attention
    short = AttentionCall(1, 4, 60, 60, 16)
    assert attention_bytes("nystrom", short) == attention_bytes("full", short)
    with pytest.raises(AttentionError):
        attention_bytes("performer", call, {"num_features": 1})


def test_half_precision_is_priced_as_autocast_runs_it() -> None:
    call = AttentionCall(4, 4, 1025, 1025, 16, itemsize=4)
    half = AttentionCall(4, 4, 1025, 1025, 16, itemsize=2)
    # full: bf16 scores, float32 softmax, a bf16 copy for ``@ v``: as much as float32's two.
    assert attention_bytes("full", half) == pytest.approx(attention_bytes("full", call), rel=0.05)
    # flash keeps its output in the input's dtype: half the bytes.
    assert attention_bytes("flash", half) < attention_bytes("flash", call)
    # the approximations compute in float32 and first copy q, k, v to it.
    assert attention_bytes("performer", half) > attention_bytes("performer", call)
