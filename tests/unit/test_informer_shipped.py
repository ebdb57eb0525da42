"""The shipped checkpoints (ETTh1; ETTm1 at context 2048): format, size, and reproduction of the recorded test quality."""

from __future__ import annotations

import json

import pytest

from models.informer import InformerForecaster, shipped_models
from models.informer.checkpoint import WEIGHTS_DIR, shipped_dirs
from models.informer.timefeatures import feature_names
from models.quality_file import backends_of
from models.training.data.source import source_of
from models.training.evaluate.informer import slice_mse
from tests.utils.informer import needs_data

pytestmark = pytest.mark.usefixtures("one_thread")

SHIPPED = shipped_models()
EXPECTED = {f"informer-etth1-h{h}" for h in (24, 48, 168, 336, 720)} | {
    f"informer-ettm1-h{h}-c2048" for h in (96, 288)
}
LONG_CONTEXT = 2048
# The checkpoints ship in the repository: each test runs over the names that must be there, so a
# missing one fails (a broken checkout), where parametrising over what was found would skip.
NAMES = sorted(EXPECTED | set(SHIPPED))


def test_all_horizons_shipped_within_size_budget():
    assert set(SHIPPED) >= EXPECTED, f"missing under models/weights/: {EXPECTED - set(SHIPPED)}"
    total = sum(p.stat().st_size for d in shipped_dirs().values() for p in d.iterdir())
    assert total < 40 * 2**20, f"shipped Informer weights take {total / 2**20:.1f} MiB"


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_is_safetensors_with_full_config(name):
    d = WEIGHTS_DIR / name
    assert not list(d.glob("*.pt")) and not list(d.glob("*.bin")) and not list(d.glob("*.pkl"))
    meta = json.loads((d / "config.json").read_text())
    for key in ("model", "context", "label_len", "horizon", "channels", "freq", "scaler"):
        assert key in meta
    assert len(meta["scaler"]["mean"]) == len(meta["scaler"]["std"]) == len(meta["channels"]) == 7
    assert meta["time_features"]["names"] == list(feature_names(meta["freq"]))
    assert meta["freq"] == ("15min" if "-ettm1-" in name else "h")
    assert f"-h{meta['horizon']}" in name and name.endswith(("-c2048", f"h{meta['horizon']}"))


@needs_data
@pytest.mark.parametrize("name", NAMES)
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
    mine = backends_of(q)[default]
    # A backend scored on every k-th window is compared with the baseline on those windows.
    baseline = mine.get("linear_mse", q["linear_baseline"]["mse"])
    assert mine["mse"] <= baseline
    if f.context >= LONG_CONTEXT:  # long context must pay: strictly better than the baseline
        assert mine["mse"] < baseline
    for backend in ("full", "flash", "nystrom"):
        r = backends_of(q)[backend]
        if r.get("windows", q["windows"]) == mine.get("windows", q["windows"]):
            assert r["mse"] <= 1.05 * mine["mse"], backend
    source = source_of(f.meta)
    table, _splits, _scaler = source.load(f.context)
    for backend in sorted({default, "full"}):
        expected = q["slice"]["mse"][backend]
        got = slice_mse(f, backend, q["slice"]["indices"], table, source)
        assert got == pytest.approx(expected, rel=1e-3, abs=1e-5), backend
