"""The Informer forecaster as a served model: histories checked and prepared up front, predicted
in batches at the model's full horizon and cut to each request's horizon afterwards."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from models.errors import ModelInputError
from models.informer import Forecast, ForecastWindow, InformerForecaster
from models.informer.timefeatures import freq_step
from models.quality_loss import forecast_losses, forecast_variant_losses
from service.servables.backends import accepted_backends, served_card
from service.servables.base import (
    Call,
    Checked,
    ForecastInput,
    Work,
    option_items,
)

# Requests of up to this many history rows are prepared on the event loop, larger ones in a
# thread. The schema has already turned the numbers into arrays and the checks, timestamps and
# calendar are vectorised, so a few context-2,048 windows take the loop less time than the hop
# to a thread and back, which on a busy host waits for the scheduler twice
# (benchmarks/results/forecast-overhead.md).
INLINE_PREPARE_ROWS = 8192
# Windows in the batch timed at start-up to measure each backend's work rate.
CALIBRATION_WINDOWS = 2


def _cut(horizon: int, forecasts: list[Forecast]) -> list[dict[str, Any]]:
    """Each forecast's first ``horizon`` steps as a response dict."""
    return [{"timestamps": f.timestamps[:horizon], "values": f.values[:horizon]} for f in forecasts]


class ForecastServable:
    """Wraps an :class:`~models.informer.InformerForecaster`."""

    task = "forecast"

    def __init__(self, forecaster: InformerForecaster) -> None:
        self.forecaster = forecaster
        self.name = forecaster.name
        self.aliases: tuple[str, ...] = ()
        self.default_attention = forecaster.default_attention
        self.context = forecaster.context
        self.horizon = forecaster.horizon
        self._backends = accepted_backends(self.forecaster.check_attention)
        # The shipped figures do not change while serving: read once, asked per auto request.
        quality = self.forecaster.quality
        self._losses: dict[Call, float] = {
            self.default_call(b): loss
            for b, loss in forecast_losses(quality).items()
            if b in self._backends
        }
        for b, options, loss in forecast_variant_losses(quality):
            if b in self._backends:  # a variant equal to the defaults keeps the default's figure
                call = Call(b, option_items(self.forecaster.check_attention(b, options)))
                self._losses.setdefault(call, loss)

    # ------------------------------------------------------------------ per request

    def check(self, request: ForecastInput) -> Checked:
        """Horizon, backend and options; the histories are checked as they are prepared."""
        horizon = self.forecaster.check_horizon(request.horizon)
        backend = request.attention or self.default_attention
        options = self.forecaster.check_attention(backend, dict(request.attention_options))
        call = Call(backend, option_items(options))
        inline = request.steps <= INLINE_PREPARE_ROWS
        return Checked(call, request, inline, {"horizon": horizon})

    def prepare(self, checked: Checked) -> Work:
        """Validated windows, one per series; the error names the series index."""
        request: ForecastInput = checked.request
        windows = self.windows(request.series)
        # Every window is cut to the model's context, so one length bucket per model.
        lengths = [self.context] * len(windows)
        return Work(windows, lengths, self.context, partial(_cut, checked.detail["horizon"]))

    def windows(self, series: Sequence[Mapping[str, Any]]) -> list[ForecastWindow]:
        """Mappings of :meth:`InformerForecaster.prepare`'s keyword arguments as windows."""
        windows = []
        for i, s in enumerate(series):
            try:
                windows.append(self.forecaster.prepare(**s))
            except ModelInputError as exc:
                raise ModelInputError(f"series {i}: {exc}") from None
        return windows

    def run(self, rows: list[Any], call: Call) -> list[Any]:
        return self.forecaster.predict(rows, call.backend, call.options_dict, validated=True)

    def card(self) -> dict[str, Any]:
        return served_card(self.forecaster.card(), self.aliases, self.backends())

    # ------------------------------------------------------------------ operations

    def backends(self) -> list[str]:
        return list(self._backends)

    def default_call(self, backend: str) -> Call:
        return Call(backend, option_items(self.forecaster.check_attention(backend, None)))

    def memory_estimate(self, call: Call, rows: int, length: int) -> int:
        # Every window is cut to the model's context: ``length`` is always the context.
        return self.forecaster.memory_estimate(call.backend, call.options_dict, rows)

    def quality_losses(self, length: int) -> dict[Call, float]:
        # Every window is cut to the model's context: the figures hold at any history length.
        return self._losses

    def measured_variants(self, backend: str) -> list[Call]:
        default = self.default_call(backend)
        return [c for c in self._losses if c.backend == backend and c != default]

    def work_estimate(self, call: Call, rows: int, length: int) -> float:
        return self.forecaster.work_estimate(call.backend, call.options_dict, rows)

    def calibration_batch(self, backend: str) -> tuple[list[Any], Call, int]:
        rows = [self._mean_window()] * CALIBRATION_WINDOWS
        return rows, self.default_call(backend), self.context

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], Call]]:
        window, call = self._mean_window(), self.default_call(backend)
        return [([window] * n, call) for n in self.forecaster.warmup_batch_sizes(backend)]

    def _mean_window(self) -> ForecastWindow:
        # The training mean at regular timestamps: always a valid, in-range history.
        index = pd.date_range(
            "2017-01-02 00:00:00", periods=self.context, freq=freq_step(self.forecaster.freq)
        )
        mean = np.asarray(self.forecaster.scaler.mean, dtype=np.float64)
        values = np.tile(mean, (self.context, 1)).tolist()
        stamps = [t.strftime("%Y-%m-%d %H:%M:%S") for t in index]
        (window,) = self.windows([{"timestamps": stamps, "values": values}])
        return window

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        served = [b for b in backends if b in self._backends]
        if served:
            self.forecaster.compile(served, batch_buckets, mode, compiler)
