"""The transformers PatchTST trained here and shipped in ``models/weights/``: served by name like
a user's folder, its card carries the figures ``attnserve evaluate`` measured, and the weights
give those figures: the test windows recorded in ``quality.json`` are re-forecast through the
public path and scored again."""

from __future__ import annotations

import numpy as np
import pytest

from models.attention import BACKENDS
from models.hf_forecast.folder import read_sidecar, shipped_folders
from models.quality_file import backends_of, read_quality
from models.training.data.source import DataSource
from models.training.data.table import load_series_csv
from service.engine.registry import load_servables
from service.settings import Settings

NAME = "patchtst-ettm1-h96-c512"


@pytest.fixture(scope="module")
def servable():
    settings = Settings(models=(NAME,), device="cpu", background_load=False)
    (served,) = load_servables(settings, "cpu")
    return served


def test_it_is_served_by_name_with_its_figures(servable) -> None:
    card = servable.card()
    assert card["class"] == "PatchTSTForPrediction" and card["source"] == "transformers"
    assert card["context"] == 512 and card["horizon"] == 96 and card["freq"] == "15min"
    assert card["channels"] == ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
    quality = read_quality(shipped_folders()[NAME] / "quality.json")
    assert card["quality"]["linear_baseline"] == quality["linear_baseline"]
    assert set(backends_of(quality)) == set(BACKENDS)
    assert "command" in card["training"]


@pytest.mark.parametrize("backend", ["flash", "performer"])
def test_the_weights_give_the_recorded_figures(servable, backend: str) -> None:
    folder = shipped_folders()[NAME]
    quality = read_quality(folder / "quality.json")
    source = DataSource.from_dict(read_sidecar(folder).data or {})
    table = load_series_csv(
        source.resolved_path(), source.date_column, list(source.columns), source.freq
    )
    lo, hi = source.borders["train"]
    std = table.values[lo:hi].std(axis=0)
    first = source.borders["test"][0] - 512
    starts = [first + i for i in quality["slice"]["indices"]]
    series = [{"values": table.values[a : a + 512].tolist()} for a in starts]
    forecasts = servable.run(servable.windows(series), servable.default_call(backend))
    pred = np.stack([np.asarray(f.values) for f in forecasts])
    target = np.stack([table.values[a + 512 : a + 512 + 96] for a in starts])
    mse = float(np.mean(((pred - target) / std) ** 2))
    assert mse == pytest.approx(quality["slice"]["mse"][backend], rel=1e-4)
