"""``attnserve train`` / ``attnserve evaluate`` on a user's CSV: the checkpoint folder they write,
resume, and the refusals of bad data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from models.attention import BACKENDS
from models.informer import InformerForecaster
from models.quality_file import backends_of, read_quality
from models.training.informer_fit import STATE_FILE
from service.cli import main as cli

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = ["--preset", "patch", "--set", "d_model=16", "n_heads=2", "d_ff=32"]
WINDOW = ["--context", "48", "--horizon", "16", "--label-len", "16"]


def _csv(path: Path, rows: int = 700) -> Path:
    stamps = pd.date_range("2020-01-01", periods=rows, freq="h")
    t = np.arange(rows)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "when": stamps.strftime("%Y-%m-%d %H:%M:%S"),
            "load": 10 + 3 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.3, rows),
            "temp": 20 + 5 * np.sin(2 * np.pi * t / 24 + 1) + rng.normal(0, 0.3, rows),
            "note": ["x"] * rows,
        }
    )
    frame.to_csv(path, index=False)
    return path


def _train(csv: Path, out: Path, *extra: str) -> None:
    args = ["train", "--data", str(csv), "--date-column", "when", "--columns", "load", "temp"]
    cli([*args, *SMALL, *WINDOW, "--max-batches", "3", "--out", str(out), *extra])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("train")
    csv = _csv(tmp / "site.csv")
    out = tmp / "site-h16"
    _train(csv, out, "--epochs", "2")
    return csv, out


@pytest.fixture
def evaluated(trained, tmp_path) -> Path:
    """A copy of the trained folder for the tests that re-run ``evaluate``: it rewrites
    quality.json in place, and the other tests must read what training wrote, whatever the
    order the tests run in."""
    _csv_path, out = trained
    return Path(shutil.copytree(out, tmp_path / out.name))


def test_train_writes_a_servable_checkpoint_folder(trained):
    csv, out = trained
    meta = json.loads((out / "config.json").read_text())
    assert meta["channels"] == ["load", "temp"] and meta["freq"] == "h"
    assert meta["context"] == 48 and meta["horizon"] == 16
    assert meta["data"]["path"] == str(csv.resolve())
    assert meta["data"]["split"] == "ratios 0.7/0.1/0.2"
    # int(0.7 · 700) = 489 in floating point, as in DLinear's loader.
    assert meta["data"]["borders"] == {"train": [0, 489], "val": [489, 560], "test": [560, 700]}
    assert meta["training"]["command"].startswith("attnserve train --data ")
    assert [h["epoch"] for h in meta["training"]["history"]] == [0, 1, 2]
    forecaster = InformerForecaster.load(str(out))
    assert forecaster.channels == ["load", "temp"]
    assert forecaster.card()["linear_path"] is True


def test_quality_json_holds_every_backend_and_the_linear_baseline(trained):
    _csv_path, out = trained
    q = read_quality(out / "quality.json")
    lin = q["linear_baseline"]["mse"]
    assert set(backends_of(q)) == set(BACKENDS)
    for r in backends_of(q).values():
        assert r["vs_linear"] == pytest.approx(r["mse"] / lin - 1, abs=1e-3)
    # Early stopping keeps the best validation epoch, the baseline (epoch 0) included: on this
    # clean daily sine the trained default backend cannot be far worse than the baseline.
    assert backends_of(q)[q["default_backend"]]["mse"] <= 1.5 * lin


def test_resume_continues_the_same_run(trained, tmp_path):
    """One epoch, then --resume to two, gives the very weights of two epochs straight."""
    csv, straight = trained
    resumed = tmp_path / "resumed"
    _train(csv, resumed, "--epochs", "1", "--no-evaluate")
    _train(csv, resumed, "--epochs", "2", "--resume", "--no-evaluate")
    a = load_file(str(straight / "model.safetensors"))
    b = load_file(str(resumed / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k
    history = json.loads((resumed / "config.json").read_text())["training"]["history"]
    assert [h["epoch"] for h in history] == [0, 1, 2]


def test_resume_without_state_says_so(tmp_path):
    csv = _csv(tmp_path / "site.csv")
    with pytest.raises(SystemExit, match=r"no .*train_state\.pt"):
        _train(csv, tmp_path / "none", "--resume")


def test_evaluate_cli_rewrites_quality(evaluated, capsys):
    out = evaluated
    cli(["evaluate", str(out), "--backends", "flash"])
    assert "linear baseline MSE" in capsys.readouterr().out


def test_evaluate_with_a_stride_scores_every_kth_window_beside_the_baseline(evaluated):
    out = evaluated
    cli(["evaluate", str(out), "--backends", "nystrom", "--stride", "3"])
    q = read_quality(out / "quality.json")
    r, windows = backends_of(q)["nystrom"], q["windows"]
    assert r["stride"] == 3 and r["windows"] == len(range(0, windows, 3))
    # The ratio is against the baseline on the same windows, not on all of them.
    assert r["vs_linear"] == pytest.approx(r["mse"] / r["linear_mse"] - 1, abs=1e-3)
    assert r["linear_mse"] != pytest.approx(q["linear_baseline"]["mse"], rel=1e-6)
    assert backends_of(q)["flash"]["windows"] == windows  # scored before, without a stride


def test_evaluate_scores_option_variants_and_only_them_when_no_backend_is_named(evaluated):
    out = evaluated
    before = backends_of(read_quality(out / "quality.json"))
    spec = ["performer:num_features=8", "nystrom:num_landmarks=4,pinv_iterations=3"]
    cli(["evaluate", str(out), "--variants", *spec, "--stride", "2"])
    q = read_quality(out / "quality.json")
    assert backends_of(q) == before  # no backend re-scored
    performer, nystrom = q["precisions"]["float32"]["variants"]
    assert (performer["backend"], performer["options"]) == ("performer", {"num_features": 8})
    assert nystrom["options"] == {"num_landmarks": 4, "pinv_iterations": 3}
    assert performer["stride"] == 2 and performer["mse"] > 0
    # At the default performer's own options the figure matches the backend's (same windows).
    cli(["evaluate", str(out), "--backends", "performer", "--variants", "performer:num_features=8"])
    q = read_quality(out / "quality.json")
    variants = q["precisions"]["float32"]["variants"]
    assert len(variants) == 2  # re-scored in place, not appended again
    assert variants[1]["stride"] == 1 and variants[1]["backend"] == "performer"


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("performer", "backend:option=value"),
        ("magic:x=1", "backend:option=value"),
        ("performer:num_features", "not option=value"),
        ("performer:num_features=2", "num_features"),  # below its minimum
        ("performer:features=16", "features"),  # no such option
    ],
)
def test_evaluate_refuses_a_bad_variant_before_scoring(evaluated, spec, match, capsys):
    out = evaluated
    before = (out / "quality.json").read_text()
    with pytest.raises(SystemExit):
        cli(["evaluate", str(out), "--variants", spec])
    err = capsys.readouterr().err
    assert "attnserve evaluate: error:" in err and match in err
    assert (out / "quality.json").read_text() == before


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda f: f.rename(columns={"when": "time"}), "when"),
        (lambda f: f.assign(load=f["load"].astype(object).where(f.index != 5, "n/a")), "load"),
        (lambda f: f.drop(index=100), "gap|irregular|step"),
        (
            lambda f: pd.concat([f.iloc[:50], f.iloc[49:]]),
            "lines 51 and 52 have the same timestamp",
        ),
        (lambda f: f.iloc[:60], "rows"),
    ],
    ids=["no-date-column", "non-numeric", "gap", "duplicate", "too-few-rows"],
)
def test_bad_data_stops_with_one_clear_message(tmp_path, edit, match):
    csv = _csv(tmp_path / "site.csv")
    edit(pd.read_csv(csv)).to_csv(csv, index=False)
    with pytest.raises(SystemExit, match=match):
        _train(csv, tmp_path / "out", "--epochs", "1")


@pytest.mark.parametrize(("min_gain", "kept"), [("0", False), ("0.5", True)])
def test_min_gain_decides_between_the_trained_network_and_the_linear_start(
    tmp_path, min_gain, kept
):
    """On this data one epoch at 3e-4 lowers the validation loss a little: with no minimum gain
    the trained network ships; asking for a 50 % gain ships the closed-form map itself (the
    network's output projection still at zero)."""
    csv = _csv(tmp_path / "site.csv")
    out = tmp_path / "out"
    flags = ["--epochs", "1", "--lr", "3e-4", "--max-batches", "10", "--no-evaluate"]
    _train(csv, out, *flags, "--min-gain", min_gain)
    training = json.loads((out / "config.json").read_text())["training"]
    history = training["history"]
    assert history[1]["val_mse"] < history[0]["val_mse"]  # the epoch did improve
    assert training["kept_linear_start"] is kept
    assert training["best_epoch"] == (0 if kept else 1)
    weights = load_file(str(out / "model.safetensors"))
    assert bool((weights["projection.weight"] == 0).all()) is kept


def test_an_unknown_backend_stops_before_training(tmp_path):
    csv = _csv(tmp_path / "site.csv")
    with pytest.raises(SystemExit, match=r"flashy.*full"):
        _train(csv, tmp_path / "out", "--backend", "flashy")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("decay", ["0", "1.5", "-0.5"])
def test_a_learning_rate_decay_outside_0_1_stops_before_reading_data(tmp_path, decay):
    with pytest.raises(SystemExit):
        _train(tmp_path / "missing.csv", tmp_path / "out", "--lr-decay", decay)
    assert not (tmp_path / "out").exists()


def test_the_learning_rate_decay_is_applied_per_epoch_and_recorded(tmp_path):
    csv = _csv(tmp_path / "site.csv")
    out = tmp_path / "out"
    _train(csv, out, "--epochs", "2", "--lr", "1e-3", "--lr-decay", "0.25", "--min-gain", "0")
    training = json.loads((out / "config.json").read_text())["training"]
    assert training["lr"] == 1e-3 and training["lr_decay"] == 0.25
    state = torch.load(out / STATE_FILE, weights_only=True)
    # Adam's param group holds the last epoch's rate: lr0 * decay^(epochs-1).
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-3 * 0.25)


def test_evaluate_scores_precisions_against_float32_exact_attention(evaluated):
    """``--precisions``: each backend scored with the network in bfloat16 and int8, recorded
    under ``precisions`` and read by the servable as each precision's loss against float32's
    exact attention; a later run that measures float32's exact reference again without
    ``--precisions`` drops them, as they were measured against the old reference (#43)."""
    from models.quality_loss import forecast_losses
    from service.engine.servables.forecast import ForecastServable

    out = evaluated
    cli(["evaluate", str(out), "--backends", "flash", "--precisions", "bfloat16", "int8"])
    q = read_quality(out / "quality.json")
    assert set(q["precisions"]) == {"float32", "bfloat16", "int8"}
    float32 = backends_of(q)["flash"]["mse"]
    for precision in ("bfloat16", "int8"):
        entry = q["precisions"][precision]["backends"]["flash"]
        assert entry["windows"] == q["windows"]  # every test window, as float32's
        mse = entry["mse"]
        assert mse == pytest.approx(float32, rel=0.05)  # (this net is near its linear start)
        loss = forecast_losses(q, precision)["flash"]
        assert loss == pytest.approx(mse / float32 - 1, abs=1e-4)
    served = ForecastServable(InformerForecaster.load(str(out)), ("float32", "bfloat16", "int8"))
    losses = {(c.backend, c.precision): v for c, v in served.quality_losses(48).items()}
    assert losses[("flash", "bfloat16")] == forecast_losses(q, "bfloat16")["flash"]
    cli(["evaluate", str(out), "--backends", "flash"])
    assert set(read_quality(out / "quality.json")["precisions"]) == {"float32"}
