"""``attnserve evaluate`` of a zero-shot folder (a tiny random TimesFM 2.5): the command scores
every registered backend on a CSV's test split, writes a ``quality.json`` that ``auto`` reads,
and its MSE, MASE and WQL are what the textbook formulas give on the model's own forecast."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models.attention import BACKENDS
from models.quality_file import backends_of, read_quality
from models.quality_loss import forecast_losses
from models.zero_shot import load_zero_shot
from service.cli import main as cli
from service.cli import run_model_tool
from tests.utils.tiny_timesfm import save_tiny_timesfm

ROWS, SEASON = 400, 24  # hourly rows, a daily cycle
TRAIN_END, VAL_END, TEST_END = 280, 320, 352  # the one-window split: test = one horizon
CONTEXT = 64


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("zero-shot-eval")
    rng = np.random.default_rng(0)
    t = np.arange(ROWS)[:, None]
    values = 10 + 3 * np.sin(2 * np.pi * t / SEASON + np.arange(2)) + rng.normal(0, 0.3, (ROWS, 2))
    frame = pd.DataFrame(values, columns=["a", "b"])
    frame.insert(0, "date", pd.date_range("2024-01-01", periods=ROWS, freq="h").astype(str))
    frame.to_csv(root / "series.csv", index=False)
    save_tiny_timesfm(root / "tiny-timesfm")
    return root


@pytest.fixture(scope="module")
def evaluated(root: Path) -> Path:
    """The folder after a default run: every backend on every 16th test window."""
    folder = root / "tiny-timesfm"
    argv = ["evaluate", str(folder), "--data", str(root / "series.csv"), "--stride", "16"]
    assert cli(argv) == 0
    return folder


def test_every_backend_is_scored_and_auto_reads_the_losses(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quality = read_quality(evaluated / "quality.json")
    scored = backends_of(quality)
    assert set(scored) == set(BACKENDS)
    assert quality["default_backend"] == "flash"
    # 0.7/0.1/0.2 of 400 rows: test rows 320-399, so 80 - 32 + 1 windows, every 16th scored.
    assert quality["windows"] == 49 and scored["flash"]["windows"] == 4
    assert quality["context"] == 280 - 32 and quality["horizon"] == 32  # capped by the train split
    assert quality["season"] == SEASON  # inferred from the hourly step
    losses = forecast_losses(quality)
    assert set(losses) == set(BACKENDS)
    assert losses["flash"] == 0.0
    assert losses["performer"] == pytest.approx(
        scored["performer"]["mse"] / scored["flash"]["mse"] - 1, abs=1e-4
    )
    for entry in scored.values():
        assert all(math.isfinite(entry[k]) for k in ("mse", "mae", "mase", "wql"))


def test_the_table_prints_the_baselines_beside_the_flash_reference(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = root / "table-run"
    shutil.copytree(root / "tiny-timesfm", folder, ignore=shutil.ignore_patterns("quality.json"))
    argv = ["evaluate", str(folder), "--data", str(root / "series.csv"), "--stride", "16"]
    assert cli([*argv, "--backends", "flash", "performer"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    assert "MASE" in lines[0] and "WQL" in lines[0] and "vs flash" in lines[0]
    labels = [line.split("|")[1].strip() for line in lines[1:]]
    assert labels == ["*seasonal naive*", "*linear*", "**flash**", "performer"]
    assert lines[3].split("|")[6].strip() == "+0.00%"  # flash against itself


def test_one_window_matches_the_formulas(root: Path) -> None:
    """A split whose test part is one horizon long: one window, recomputed here by hand."""
    folder = root / "one-window"
    shutil.copytree(root / "tiny-timesfm", folder, ignore=shutil.ignore_patterns("quality.json"))
    borders = [str(b) for b in (TRAIN_END, VAL_END, TEST_END)]
    argv = ["evaluate", str(folder), "--data", str(root / "series.csv"), "--backends", "flash"]
    argv += ["--split-borders", *borders, "--context", str(CONTEXT), "--season", str(SEASON)]
    assert cli(argv) == 0
    quality = read_quality(folder / "quality.json")

    values = pd.read_csv(root / "series.csv")[["a", "b"]].to_numpy(np.float64)
    std = values[:TRAIN_END].std(axis=0)
    history, target = values[VAL_END - CONTEXT : VAL_END], values[VAL_END:TEST_END]
    f = load_zero_shot(folder)
    (answer,) = f.predict([f.prepare(values=history)], "flash")
    point, quantiles = np.asarray(answer.values), np.asarray(answer.quantiles)

    # MASE's scale: the mean seasonal change over every row before the forecast, per channel.
    scale = np.array(
        [
            np.mean([abs(values[t, c] - values[t - SEASON, c]) for t in range(SEASON, VAL_END)])
            for c in range(2)
        ]
    )

    def pinball(q: float, y: np.ndarray, guess: np.ndarray) -> float:
        return float(np.sum(np.where(y >= guess, q * (y - guess), (1 - q) * (guess - y))))

    def wql(guesses: list[np.ndarray]) -> float:
        per_level = [
            2 * pinball(q, target, g) / np.abs(target).sum()
            for q, g in zip(f.levels, guesses, strict=True)
        ]
        return float(np.mean(per_level))

    flash = backends_of(quality)["flash"]
    assert flash["windows"] == 1
    assert flash["mse"] == pytest.approx(np.mean(((point - target) / std) ** 2), abs=2e-6)
    assert flash["mase"] == pytest.approx(np.mean(np.abs(point - target).mean(0) / scale), abs=2e-6)
    assert flash["wql"] == pytest.approx(wql(list(quantiles)), abs=2e-6)

    # y(T + h) guessed as y(T + h - m * ceil(h / m)), h = 1..H, T the last history row.
    last = CONTEXT - 1
    naive = np.array(
        [history[last + h - SEASON * math.ceil(h / SEASON)] for h in range(1, len(target) + 1)]
    )
    got = quality["seasonal_naive"]
    assert got["mse"] == pytest.approx(np.mean(((naive - target) / std) ** 2), abs=2e-6)
    assert got["mase"] == pytest.approx(np.mean(np.abs(naive - target).mean(0) / scale), abs=2e-6)
    assert got["wql"] == pytest.approx(wql([naive] * len(f.levels)), abs=2e-6)
    # This sine repeats daily, so the seasonal-naive forecast beats a naive-sized error.
    assert got["mase"] < 2


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "--data CSV"),
        (["--season", "0"], "--season must be at least 1"),
        (["--horizon", "33"], "33"),
        (["--context", "5000"], "longer than the model reads"),
        (["--context", "300"], "too small for context 300"),
        (["--season", "100", "--context", "64"], "--season 100 is longer than the context"),
        (["--columns", "nope"], "no column 'nope'"),
    ],
)
def test_bad_flags_are_refused_with_a_reason(
    root: Path, flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = [] if not flags else ["--data", str(root / "series.csv")]
    if "--context" in flags and "300" in flags:
        data += ["--split-borders", str(TRAIN_END), str(VAL_END), str(TEST_END)]
    with pytest.raises(SystemExit) as exited:
        cli(["evaluate", str(root / "tiny-timesfm"), *data, *flags])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_evaluate_help_lists_zero_shot_folders(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_model_tool("evaluate", ["--help"])
    assert "zero-shot forecaster folder" in capsys.readouterr().out


def test_a_chronos2_folder_runs_through_the_same_command(root: Path) -> None:
    """Written against the shared forecaster only: Chronos-2 scores the same way."""
    pytest.importorskip("chronos")
    from tests.utils.tiny_chronos import build_chronos2

    folder = build_chronos2(root / "tiny-chronos2")
    argv = ["evaluate", str(folder), "--data", str(root / "series.csv"), "--stride", "24"]
    assert cli([*argv, "--backends", "flash", "performer", "--horizon", "8"]) == 0
    quality = read_quality(folder / "quality.json")
    assert quality["horizon"] == 8
    losses = forecast_losses(quality)
    assert losses["flash"] == 0.0 and math.isfinite(losses["performer"])
    assert backends_of(quality)["flash"]["wql"] > 0
