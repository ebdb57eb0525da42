"""Chronos-2 served with our attention backends: the exact backends equal the package's own
``Chronos2Pipeline.predict_quantiles`` on the same inputs (univariate, multivariate, covariates
past and known-future, numeric and categorical, missing values, series of different lengths),
every registered backend runs, and each layer runs what the plan priced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.attention import BACKENDS, get_backend
from models.errors import ModelInputError
from models.hf_forecast.bridge import backend_scope
from models.zero_shot import load_zero_shot, zero_shot_kind
from models.zero_shot.chronos2 import Chronos2Forecaster
from tests.utils.tiny_chronos import LEVELS, build_chronos2, pipeline_quantiles, wave

HORIZON = 20  # not a multiple of the patch (8): the model runs 3 output patches
EXACT = ("flash", "full")
# Approximate backends on a smooth series, as a share of flash's largest |quantile|: measured
# 0.11 (reformer), 0.08 (probsparse), 0.03 (performer, nystrom, skyformer); bigbird's blocks
# cover all 261 tokens at its defaults, so it is exact here. The bound leaves 4x headroom.
APPROX_BOUND = 0.5


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chronos2(tmp_path_factory.mktemp("chronos2") / "tiny-chronos2")


@pytest.fixture(scope="module")
def model(folder: Path) -> Chronos2Forecaster:
    forecaster = load_zero_shot(folder)
    assert isinstance(forecaster, Chronos2Forecaster)
    return forecaster


def _categories(steps: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice(["sun", "rain", "fog"], size=steps)


def _case(kind: str) -> list[dict[str, Any]]:
    """Pipeline dict inputs (target ``[c, T]``) for one kind of series, of different lengths."""
    out: list[dict[str, Any]] = []
    for i, steps in enumerate((40, 97, 160)):
        channels = 3 if kind == "multivariate" else 1
        target = wave(steps, seed=i, channels=channels).T.astype(np.float32)
        item: dict[str, Any] = {"target": target}
        if kind == "missing":
            target[0, 5:12] = np.nan
            target[0, 0] = np.nan
        if kind in ("past", "future"):
            item["past_covariates"] = {
                "temp": wave(steps, seed=10 + i)[:, 0].astype(np.float32),
                "weather": _categories(steps, seed=20 + i),
            }
        if kind == "past":
            item["past_covariates"]["price"] = wave(steps, seed=30 + i)[:, 0].astype(np.float32)
        if kind == "future":
            item["future_covariates"] = {
                "temp": wave(HORIZON, seed=40 + i)[:, 0].astype(np.float32),
                "weather": _categories(HORIZON, seed=50 + i),
            }
        out.append(item)
    return out


def _request(item: dict[str, Any]) -> dict[str, Any]:
    """The same series as a ``prepare`` call (rows ``[T, c]``, NaN as null)."""
    request: dict[str, Any] = {"values": item["target"].T.astype(np.float64), "horizon": HORIZON}
    for field in ("past_covariates", "future_covariates"):
        if field in item:
            request[field] = {k: list(v) for k, v in item[field].items()}
    return request


def _largest(values: np.ndarray) -> float:
    return float(np.abs(values).max())


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("kind", ["univariate", "multivariate", "past", "future", "missing"])
def test_exact_backends_equal_the_pipeline(
    model: Chronos2Forecaster, folder: Path, kind: str, backend: str
) -> None:
    inputs = _case(kind)
    want_q, want_point = pipeline_quantiles(folder, inputs, HORIZON)
    windows = [model.prepare(**_request(item)) for item in inputs]
    got = model.predict(windows, backend, horizon=HORIZON)
    for g, q, point in zip(got, want_q, want_point, strict=True):
        assert g.levels == LEVELS
        assert g.quantiles.shape == q.shape == (len(LEVELS), HORIZON, q.shape[2])
        assert np.abs(g.quantiles - q).max() <= 1e-4 * _largest(q)
        assert np.abs(np.asarray(g.values) - point).max() <= 1e-4 * _largest(point)


def test_a_series_answer_does_not_depend_on_its_batch(model: Chronos2Forecaster) -> None:
    # Different lengths, widths and covariates in one batch: each its own group, padded, masked.
    items = _case("future")[:2] + _case("multivariate")[2:] + _case("missing")[:1]
    windows = [model.prepare(**_request(item)) for item in items]
    together = model.predict(windows, "flash", horizon=HORIZON)
    for window, joint in zip(windows, together, strict=True):
        (alone,) = model.predict([window], "flash", horizon=HORIZON)
        assert np.abs(joint.quantiles - alone.quantiles).max() <= 1e-4 * _largest(alone.quantiles)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_runs_what_the_plan_says(model: Chronos2Forecaster, backend: str) -> None:
    windows = [model.prepare(values=wave(n, seed=n), horizon=HORIZON) for n in (300, 2000)]
    tokens = max(w.tokens for w in windows)
    options = {k: v for k, v in model.check_attention(backend).items() if v is not None}
    with torch.inference_mode(), backend_scope(backend, options) as scope:
        answers = model.forecast(windows, HORIZON)
    plan = model.plan(backend, None, tokens)
    assert list(scope.layers) == model.layer_names == list(plan)
    assert scope.layers == {name: choice.backend for name, choice in plan.items()}
    assert scope.reasons == {n: c.reason for n, c in plan.items() if c.reason}
    for point, quantiles in answers:
        assert quantiles.shape == (len(LEVELS), HORIZON, 1)
        assert np.isfinite(quantiles).all() and np.isfinite(point).all()


def test_a_backend_that_cannot_take_the_layer_falls_back_with_a_reason(
    model: Chronos2Forecaster,
) -> None:
    # flash's jagged padding needs CUDA: on CPU every time layer runs exact, saying why.
    if model.device.type == "cuda":
        pytest.skip("jagged padding runs on CUDA")
    plan = model.plan("flash", {"padding": "jagged"})
    assert len(plan) == 2
    for choice in plan.values():
        assert choice.backend in EXACT and choice.reason and "CUDA" in choice.reason


@pytest.mark.parametrize("backend", [b for b in BACKENDS if not get_backend(b).exact])
def test_approximate_backends_stay_near_flash(model: Chronos2Forecaster, backend: str) -> None:
    t = np.arange(2000)
    window = model.prepare(values=1.0 + 3.0 * np.sin(t / 24.0), horizon=HORIZON)
    (exact,) = model.predict([window], "flash", horizon=HORIZON)
    (approx,) = model.predict([window], backend, horizon=HORIZON)
    assert np.abs(approx.quantiles - exact.quantiles).max() <= APPROX_BOUND * _largest(
        exact.quantiles
    )


def test_window_tokens_are_the_time_attention_length(model: Chronos2Forecaster) -> None:
    seen: list[int] = []
    layer = model.model.encoder.block[0].layer[0].self_attention
    handle = layer.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[1]))
    try:
        for steps, horizon in ((97, HORIZON), (3000, 32), (8, 1)):
            window = model.prepare(values=wave(steps, seed=1), horizon=horizon)
            model.predict([window], "flash", horizon=horizon)
            assert seen[-1] == window.tokens
    finally:
        handle.remove()
    assert model.tokens_of(10**6) == 2048 // 8 + 1 + 4  # context patches, [REG], output patches


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"past_covariates": {"temp": [1.0] * 39}}, "past_covariates['temp']"),
        ({"future_covariates": {"rain": [1.0] * HORIZON}}, "future_covariates['rain']"),
        (
            {"past_covariates": {"w": [1.0] * 40}, "future_covariates": {"w": ["a"] * HORIZON}},
            "future_covariates['w']",
        ),
        ({"values": np.c_[wave(40, 0), np.full(40, np.nan)]}, "channel 1"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    model: Chronos2Forecaster, change: dict[str, Any], field: str
) -> None:
    request = {"values": wave(40, seed=0), "horizon": HORIZON, "item_id": "a", **change}
    with pytest.raises(ModelInputError, match="series 'a'") as caught:
        model.prepare(**request)
    assert field in str(caught.value)


def test_horizon_beyond_one_pass_is_refused(model: Chronos2Forecaster) -> None:
    assert model.horizon == 32
    with pytest.raises(ModelInputError):
        model.prepare(values=wave(40, seed=0), horizon=33)


def test_folder_kind_and_card(model: Chronos2Forecaster, folder: Path) -> None:
    assert zero_shot_kind(folder) == "chronos2"
    card = model.card()
    assert card["head"]["levels"] == list(LEVELS)
    assert (card["context"], card["patch"], card["horizon"]) == (2048, 8, 32)
    assert "group self-attention" in card["attention"] and "exact" in card["attention"]
    assert card["covariates"] == ["past_covariates", "future_covariates"]
    assert model.work_estimate("flash", rows=2) > model.work_estimate("flash", rows=1) > 0
    assert model.memory_estimate("flash", rows=1, tokens=100) > 0
