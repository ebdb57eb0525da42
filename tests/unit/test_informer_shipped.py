"""The shipped ETTh1 checkpoints: format, size, and reproduction of the recorded test quality."""

from __future__ import annotations

import json

import pytest

from models.informer import InformerForecaster, shipped_models
from models.informer.checkpoint import WEIGHTS_DIR, shipped_dirs
from models.informer.evaluate import slice_mse
from models.informer.source import source_of
from tests.unit.test_informer_helpers import needs_data, one_thread  # noqa: F401

SHIPPED = shipped_models()
EXPECTED = {f"informer-etth1-h{h}" for h in (24, 48, 168, 336, 720)}
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no Informer checkpoints under models/weights/")


def test_all_horizons_shipped_within_size_budget():
    assert EXPECTED.issubset(SHIPPED)
    total = sum(p.stat().st_size for d in shipped_dirs().values() for p in d.iterdir())
    assert total < 40 * 2**20, f"shipped Informer weights take {total / 2**20:.1f} MiB"


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_is_safetensors_with_full_config(name):
    d = WEIGHTS_DIR / name
    assert not list(d.glob("*.pt")) and not list(d.glob("*.bin")) and not list(d.glob("*.pkl"))
    meta = json.loads((d / "config.json").read_text())
    for key in ("model", "context", "label_len", "horizon", "channels", "freq", "scaler"):
        assert key in meta
    assert len(meta["scaler"]["mean"]) == len(meta["scaler"]["std"]) == len(meta["channels"]) == 7
    assert meta["time_features"]["names"] == [
        "hour_of_day",
        "day_of_week",
        "day_of_month",
        "day_of_year",
    ]
    assert name.endswith(f"h{meta['horizon']}")


@needs_data
@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_beats_the_linear_baseline_and_reproduces_its_quality(name):
    """The recorded full-test MSE of the default backend is at or below the closed-form linear
    baseline at the same context; the exact backends and Nyström stay within 5 % of it; and the
    public prepare/predict path reproduces the recorded MSE on a fixed slice of test windows."""
    f = InformerForecaster.load(name)
    q = f.quality
    assert q, f"{name} has no quality.json; run attnserve evaluate"
    default = q["default_backend"]
    assert default == f.default_attention
    assert q["context"] == f.context and q["horizon"] == f.horizon
    assert q["backends"][default]["mse"] <= q["linear_baseline"]["mse"]
    for backend in ("full", "flash", "nystrom"):
        assert q["backends"][backend]["mse"] <= 1.05 * q["backends"][default]["mse"], backend
    source = source_of(f.meta)
    table, _splits, _scaler = source.load(f.context)
    for backend in sorted({default, "full"}):
        expected = q["slice"]["mse"][backend]
        got = slice_mse(f, backend, q["slice"]["indices"], table, source)
        assert got == pytest.approx(expected, rel=1e-3, abs=1e-5), backend
