"""TimesFM 2.5 (issue 53): a folder transformers wrote answers equal to the class's own forward on
the same single series, whatever it is batched with; every backend runs inside it; its options,
missing values and per-series clamping follow the rules the module states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.attention import BACKENDS
from models.errors import ModelInputError
from models.zero_shot import load_zero_shot, zero_shot_kind
from models.zero_shot.timesfm import fill_missing
from tests.utils.tiny_timesfm import TINY, reference, save_tiny_timesfm

EXACT = ("flash", "full")
RELATIVE = 1e-4
# Lengths: shorter than a patch, not a whole number of patches, whole, and past the context
# (the model reads its last context steps).
LENGTHS = (20, 100, 256, 1500)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_timesfm(tmp_path_factory.mktemp("timesfm") / "timesfm-tiny")


@pytest.fixture(scope="module")
def forecaster(folder: Path):
    return load_zero_shot(folder)


@pytest.fixture(scope="module")
def ref(folder: Path):
    return reference(folder)


def walk(n: int, seed: int, shift: float = 0.0) -> np.ndarray:
    """A random walk that crosses zero (so no clamping applies unless a test wants it)."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(size=n)) + shift


def own_forward(ref, series: np.ndarray, **options) -> tuple[np.ndarray, np.ndarray]:
    """The class's forward on one series alone: point ``[H]`` and quantiles ``[levels, H]``."""
    with torch.no_grad():
        out = ref(past_values=[torch.tensor(series, dtype=torch.float32)], **options)
    return out.mean_predictions[0].numpy(), out.full_predictions[0, :, 1:].numpy().T


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_the_folder_is_recognised_and_described(folder: Path, forecaster) -> None:
    assert zero_shot_kind(folder) == "timesfm2_5"
    card = forecaster.card()
    assert card["context"] == TINY["context_length"]
    assert card["horizon"] == TINY["horizon_length"]
    assert card["head"]["levels"] == pytest.approx([0.1 * i for i in range(1, 10)])
    assert set(card["backends"]) == set(BACKENDS)


@pytest.mark.parametrize("backend", EXACT)
def test_equal_to_its_own_forward_whatever_the_batch(forecaster, ref, backend: str) -> None:
    series = [walk(n, seed=n) for n in LENGTHS]
    windows = [forecaster.prepare(values=s[:, None].tolist()) for s in series]
    batched = forecaster.predict(windows, backend)
    for s, got in zip(series, batched, strict=True):
        point, quantiles = own_forward(ref, s, truncate_negative=False)
        assert relative(np.asarray(got.values)[:, 0], point) <= RELATIVE
        assert relative(got.quantiles[:, :, 0], quantiles) <= RELATIVE


@pytest.fixture(scope="module")
def long_forecaster(tmp_path_factory: pytest.TempPathFactory):
    """A context of 256 tokens: long enough that every approximation runs as itself (block,
    landmark and sampling sizes below the length) rather than falling back to exact."""
    root = tmp_path_factory.mktemp("timesfm-long")
    return load_zero_shot(save_tiny_timesfm(root / "timesfm-long", context_length=8192))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_series_answer_does_not_depend_on_its_neighbours(long_forecaster, backend: str) -> None:
    forecaster = long_forecaster
    series = [walk(n, seed=n) for n in (4800, 5000, 8000)]  # 150, 157 and 250 tokens
    windows = [forecaster.prepare(values=s[:, None].tolist()) for s in series]
    together = forecaster.predict(windows, backend)
    for window, got in zip(windows, together, strict=True):
        (alone,) = forecaster.predict([window], backend)
        assert np.isfinite(got.quantiles).all()
        np.testing.assert_allclose(got.values, alone.values, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.quantiles, alone.quantiles, rtol=1e-5, atol=1e-5)


def test_approximations_stay_near_exact_on_a_smooth_series(forecaster) -> None:
    """Each approximation's point forecast against flash's on a 512-step wave. Random weights
    make the figures no quality claim; the bound catches a backend whose masks or scaling are
    wrong (those answers move by the forecast's whole scale)."""
    t = np.arange(512)
    wave = np.sin(2 * np.pi * t / 48) + 0.01 * t
    (window,) = [forecaster.prepare(values=wave[:, None].tolist())]
    (exact,) = forecaster.predict([window], "flash")
    for backend in BACKENDS:
        (got,) = forecaster.predict([window], backend)
        assert relative(np.asarray(got.values), np.asarray(exact.values)) < 0.5, backend


def test_channels_are_independent_rows(forecaster, ref) -> None:
    a, b = walk(300, 1), walk(300, 2)
    (window,) = [forecaster.prepare(values=np.stack([a, b], 1).tolist())]
    (got,) = forecaster.predict([window], "flash")
    for channel, s in enumerate((a, b)):
        point, _ = own_forward(ref, s, truncate_negative=False)
        assert relative(np.asarray(got.values)[:, channel], point) <= RELATIVE


def test_options_are_the_models_own(forecaster, ref) -> None:
    s = walk(333, 7)
    options = {"window_size": 5, "force_flip_invariance": False, "truncate_negative": False}
    window = forecaster.prepare(values=s[:, None].tolist(), model_options=options)
    (got,) = forecaster.predict([window], "flash")
    point, quantiles = own_forward(ref, s, **options)
    assert relative(np.asarray(got.values)[:, 0], point) <= RELATIVE
    assert relative(got.quantiles[:, :, 0], quantiles) <= RELATIVE
    # The options change the answer (else this test could not tell them apart).
    (default,) = forecaster.predict([forecaster.prepare(values=s[:, None].tolist())], "flash")
    assert relative(np.asarray(default.values), np.asarray(got.values)) > 1e-3


def test_truncate_negative_reads_the_series_own_minimum(forecaster, ref) -> None:
    positive, crossing = walk(200, 3, shift=50.0), walk(200, 4, shift=-50.0)
    assert positive.min() > 0 > crossing.max()
    windows = [forecaster.prepare(values=s[:, None].tolist()) for s in (positive, crossing)]
    got = forecaster.predict(windows, "flash")
    # transformers reads the minimum over the batch: the two together would not clamp at all.
    for s, answer in zip((positive, crossing), got, strict=True):
        point, quantiles = own_forward(ref, s, truncate_negative=True)
        assert relative(np.asarray(answer.values)[:, 0], point) <= RELATIVE
        assert relative(answer.quantiles[:, :, 0], quantiles) <= RELATIVE
    assert (got[0].quantiles >= 0).all()


def test_missing_values_follow_the_timesfm_rule(forecaster, ref) -> None:
    s = walk(260, 9)
    holed = s.copy()
    holed[:10] = np.nan  # leading: dropped
    holed[100:104] = np.nan  # inside: linearly interpolated
    holed[-1] = np.nan  # trailing: the last observed value carries on
    filled = fill_missing(holed)
    assert len(filled) == len(s) - 10
    np.testing.assert_allclose(filled[90:94], np.linspace(s[99], s[104], 6)[1:5])
    assert filled[-1] == s[-2]
    (window,) = [forecaster.prepare(values=[[v] for v in holed.tolist()])]
    (got,) = forecaster.predict([window], "flash")
    point, _ = own_forward(ref, filled, truncate_negative=False)
    assert relative(np.asarray(got.values)[:, 0], point) <= RELATIVE


@pytest.mark.parametrize(
    ("series", "fragment"),
    [
        ({"values": [[1.0], [float("inf")]]}, "infinite"),
        ({"values": [[None], [None]]}, "no observed value"),
        ({"values": []}, "empty"),
        ({"values": [[1.0, 2.0], [3.0]]}, "one width"),
        ({"values": [[1.0]], "past_covariates": {"x": [1.0]}}, "takes no past_covariates"),
        ({"values": [[1.0]], "model_options": {"window": 3}}, "unknown: window"),
        ({"values": [[1.0]], "model_options": {"window_size": 0}}, "window_size"),
        ({"values": [[1.0]], "horizon": TINY["horizon_length"] + 1}, "horizon"),
    ],
)
def test_bad_series_are_refused_naming_what_is_wrong(forecaster, series, fragment) -> None:
    with pytest.raises(ModelInputError, match=fragment):
        forecaster.prepare(**series)


def test_plans_follow_the_length_and_fall_back_where_a_backend_cannot_run(forecaster) -> None:
    for backend in BACKENDS:
        for tokens in (1, 4, 32):
            plan = forecaster.plan(backend, None, tokens)
            assert len(plan) == TINY["num_hidden_layers"]
            for choice in plan.values():
                assert choice.backend == backend or choice.reason, (backend, tokens)
    # Work grows with the length and a longer series never prices below a shorter one.
    works = [forecaster.work_estimate("flash", None, 1, n) for n in (1, 4, 16, 32)]
    assert works == sorted(works) and works[0] < works[-1]
