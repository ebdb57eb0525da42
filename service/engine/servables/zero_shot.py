"""A zero-shot foundation forecaster (TimesFM 2.5, Chronos-2) as a served model.

It is the forecast servable with what varies per series: each window runs at its own length
(tokens), so requests batch with neighbours of a similar length and every batch is priced at its
length; the answer's quantiles are read off the model's own levels (interpolated between them,
:mod:`models.zero_shot.quantiles`) rather than from samples; the model's own options
(``model_options``) and covariates travel with each series.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from models.zero_shot.folder import zero_shot_kind
from service.engine.batching.policy import length_bucket
from service.engine.servables.base import Call, Checked, ForecastInput, Work
from service.engine.servables.forecast import ForecastServable, cut_forecasts

__all__ = ["ZeroShotServable", "load_zero_shot_servable", "refuse_foreign", "zero_shot_kind"]

# The smallest length bucket, in tokens (TimesFM's patch is 32 steps: 16 tokens = 512 steps).
SMALLEST_BUCKET = 4


class ZeroShotServable(ForecastServable):
    """Serves a :class:`~models.zero_shot.forecaster.ZeroShotForecaster`."""

    zero_shot = True

    def check(self, request: ForecastInput) -> Checked:
        checked = super().check(request)
        self.model.check_quantiles(request.quantiles)
        self.model.read_options(request.model_options)  # once per request, not per series
        return checked

    def prepare(self, checked: Checked) -> Work:
        request: ForecastInput = checked.request
        horizon = checked.detail["horizon"]
        series = [
            {**s, "horizon": horizon, "model_options": request.model_options}
            for s in request.series
        ]
        windows = self.future_checked(self.windows(series), checked)
        lengths = [w.tokens for w in windows]
        bucket = length_bucket(max(lengths), SMALLEST_BUCKET)
        return Work(
            windows, lengths, bucket, partial(cut_forecasts, horizon, tuple(request.quantiles))
        )

    def memory_estimate(self, call: Call, rows: int, length: int) -> int:
        forecaster = self.models[call.precision]
        return forecaster.memory_estimate(call.backend, call.options_dict, rows, length)

    def work_estimate(self, call: Call, rows: int, length: int) -> float:
        return self.model.work_estimate(call.backend, call.options_dict, rows, length)

    def calibration_batch(self, backend: str) -> tuple[list[Any], Call, int]:
        rows, call, _ = super().calibration_batch(backend)
        return rows, call, rows[0].tokens  # priced at its own length, not a fixed context


def load_zero_shot_servable(folder: Path, device: str, precisions: Sequence[str]) -> Any:
    """The servable of a TimesFM 2.5 or Chronos-2 folder. A folder that cannot be served raises
    ValueError (``FolderError``), which the registry turns into one line naming the folder."""
    from models.zero_shot import load_zero_shot

    return ZeroShotServable(load_zero_shot(folder, device), precisions)


def refuse_foreign(folder: Path) -> None:
    """ValueError for a folder whose ``config.json`` names a ``model_type`` that no loader
    serves (attnserve's own checkpoints have none): one line naming it and the families that
    are served, instead of the checkpoint loader's complaint about its own keys."""
    from models.hf_forecast.folder import PREDICTION_CLASSES, read_config
    from models.text.folders.embedding import ARCHITECTURES
    from models.zero_shot import FORECASTERS

    config = read_config(folder)
    model_type = (config or {}).get("model_type")
    if not model_type:
        return
    raise ValueError(
        f"model_type {model_type!r} is not served. Served: text encoders "
        f"({', '.join(sorted(ARCHITECTURES))}, or any transformers backbone inside a "
        "sentence-transformers folder), transformers forecasters "
        f"({', '.join(sorted(PREDICTION_CLASSES))}), zero-shot forecasters "
        f"({', '.join(sorted(FORECASTERS))})"
    )
