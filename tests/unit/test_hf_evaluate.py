"""``attnserve evaluate`` of a transformers time-series folder: the figures are the class's own
forecasts scored like our checkpoints, beside the same linear baseline, and ``auto`` uses them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models.attention import BACKENDS
from models.quality_file import backends_of, read_quality
from models.training.data.source import DataSource
from service.cli import main as cli
from service.engine.registry import load_servables
from service.engine.servables.base import Call
from service.settings import Settings
from tests.utils.tiny_forecasters import CHANNELS, build, patchtst_config, patchtst_reference

ROWS, STRIDE = 600, 7
RIDGE = 1e-3  # the linear baseline's documented ridge per training row (models/training/linear.py)


def linear_mse(scaled: np.ndarray, ctx: int, horizon: int, starts: np.ndarray) -> float:
    """The NLinear-style baseline written out: on every training window (rows 0-359) of every
    channel, ridge least squares from the context minus its last value to the horizon minus it,
    solved as an augmented ``lstsq``; scored on the windows at ``starts``."""

    def pairs(first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.array([scaled[a : a + ctx, c] for a in first for c in range(scaled.shape[1])])
        y = np.array(
            [scaled[a + ctx : a + ctx + horizon, c] for a in first for c in range(scaled.shape[1])]
        )
        last = x[:, -1:]
        return x - last, y - last, last

    x, y, _ = pairs(np.arange(0, 360 - ctx - horizon + 1))
    root = np.sqrt(RIDGE * len(x)) * np.eye(ctx)
    weight = np.linalg.lstsq(np.vstack([x, root]), np.vstack([y, np.zeros((ctx, horizon))]))[0]
    x, y, _ = pairs(starts)
    return float(np.mean((x @ weight - y) ** 2))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf-eval")
    rng = np.random.default_rng(0)
    t = np.arange(ROWS)[:, None]
    values = 10 + np.sin(t / 9 + np.arange(3)) * 3 + rng.normal(scale=0.3, size=(ROWS, 3))
    frame = pd.DataFrame(values, columns=list(CHANNELS))
    frame.insert(0, "date", pd.date_range("2024-01-01", periods=ROWS, freq="h").astype(str))
    frame.to_csv(root / "series.csv", index=False)
    source = DataSource(
        str(root / "series.csv"),
        "date",
        CHANNELS,
        "h",
        {"train": (0, 360), "val": (360, 480), "test": (480, 600)},
        "borders",
    )
    sidecar = {"channels": list(CHANNELS), "freq": "h", "data": source.to_dict()}
    out = build(patchtst_config(), root / "tiny-patchtst", sidecar=sidecar)
    assert cli(["evaluate", str(out), "--stride", str(STRIDE)]) == 0
    return out


def test_quality_is_the_class_forecast_scored_beside_the_linear_baseline(folder: Path) -> None:
    quality = read_quality(folder / "quality.json")
    frame = pd.read_csv(folder.parent / "series.csv")
    values = frame[list(CHANNELS)].to_numpy(dtype=np.float64)
    mean, std = values[:360].mean(axis=0), values[:360].std(axis=0)
    ctx, horizon = 96, 12
    starts = np.arange(0, 120 - horizon + 1)[::STRIDE] + 480 - ctx
    histories = np.stack([values[a : a + ctx] for a in starts])
    targets = np.stack([values[a + ctx : a + ctx + horizon] for a in starts])
    want = float(np.mean(((patchtst_reference(folder, histories) - targets) / std) ** 2))
    for backend in ("full", "flash"):
        assert backends_of(quality)[backend]["mse"] == pytest.approx(want, rel=1e-4)
        assert backends_of(quality)[backend]["windows"] == len(starts)
    scaled = (values - mean) / std
    every = np.arange(0, 120 - horizon + 1) + 480 - ctx  # quality.json rounds to 6 decimals
    assert quality["linear_baseline"]["mse"] == pytest.approx(
        linear_mse(scaled, ctx, horizon, every), abs=1e-6
    )
    assert backends_of(quality)["flash"]["linear_mse"] == pytest.approx(
        linear_mse(scaled, ctx, horizon, starts), abs=1e-6
    )
    assert set(backends_of(quality)) == set(BACKENDS)


def test_auto_uses_the_figures(folder: Path) -> None:
    settings = Settings(models=(str(folder),), device="cpu", background_load=False)
    (servable,) = load_servables(settings, "cpu")
    losses = servable.quality_losses(96)
    assert losses[servable.default_call("flash")] == pytest.approx(0.0, abs=1e-9)
    assert set(c.backend for c in losses) == set(BACKENDS)
    assert all(isinstance(c, Call) for c in losses)
    card = servable.card()
    assert (
        card["backends"]["flash"]["quality"]["mse"] == card["quality"]["backends"]["flash"]["mse"]
    )


def test_precisions_are_scored_beside_float32_and_auto_reads_them(folder: Path) -> None:
    """``--precisions bfloat16`` on a point-head PatchTST: every listed backend scored again in
    bfloat16 under ``precisions``, the float32 figures kept, and a server that loads bfloat16
    offers ``auto`` its rows."""
    before = read_quality(folder / "quality.json")
    argv = ["evaluate", str(folder), "--stride", str(STRIDE), "--backends", "flash", "performer"]
    assert cli([*argv, "--precisions", "bfloat16"]) == 0
    quality = read_quality(folder / "quality.json")
    bf16 = quality["precisions"]["bfloat16"]["backends"]
    assert set(bf16) == {"flash", "performer"}
    for backend in ("flash", "performer"):
        assert backends_of(quality)[backend]["mse"] == backends_of(before)[backend]["mse"]
        # bfloat16 moves the forecast a little, not the model's quality.
        assert bf16[backend]["mse"] == pytest.approx(backends_of(quality)[backend]["mse"], rel=0.05)
        assert bf16[backend]["mse"] != backends_of(quality)[backend]["mse"]
        assert bf16[backend]["windows"] == backends_of(quality)[backend]["windows"]
    settings = Settings(
        models=(str(folder),),
        device="cpu",
        background_load=False,
        precisions=("float32", "bfloat16"),
    )
    (servable,) = load_servables(settings, "cpu")
    losses = servable.quality_losses(96)
    assert {c.backend for c in losses if c.precision == "bfloat16"} == {"flash", "performer"}


def test_a_precision_the_model_does_not_run_is_refused_before_scoring(
    tmp_path: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sidecar = json.loads((folder / "attnserve.json").read_text())
    probabilistic = build(patchtst_config("normal"), tmp_path / "tiny-normal", sidecar=sidecar)
    with pytest.raises(SystemExit) as exited:
        cli(["evaluate", str(probabilistic), "--precisions", "bfloat16"])
    assert exited.value.code == 2
    assert "float32 only" in capsys.readouterr().err
    assert not (probabilistic / "quality.json").exists()
