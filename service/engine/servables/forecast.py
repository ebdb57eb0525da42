"""A forecaster as a served model: histories checked and prepared up front, predicted in batches
at the model's full horizon and cut to each request's horizon afterwards.

Serves our Informer checkpoints (:class:`~models.informer.InformerForecaster`) and transformers'
time-series folders (:class:`~models.hf_forecast.HFForecaster`) alike: both prepare a series
into a window, predict a batch of windows with a backend and describe themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION
from models.quality_loss import forecast_losses, forecast_variant_losses
from models.zero_shot.quantiles import at_levels
from models.zero_shot.series import ZeroShotForecast
from service.engine.servables.base import (
    EXTRA_INPUTS,
    Call,
    Checked,
    ForecastInput,
    Work,
    check_precision,
    option_items,
)
from service.engine.servables.servable import Servable, accepted_backends

log = logging.getLogger("attnserve")

# Requests of up to this many history rows are prepared on the event loop, larger ones in a
# thread. The schema has already turned the numbers into arrays and the checks, timestamps and
# calendar are vectorised, so a few context-2,048 windows take the loop less time than the hop
# to a thread and back, which on a busy host waits for the scheduler twice
# (benchmarks/results/forecast-overhead.md).
INLINE_PREPARE_ROWS = 8192
# Windows in the batch timed at start-up to measure each backend's work rate.
CALIBRATION_WINDOWS = 2


def cut_forecasts(
    horizon: int, quantiles: tuple[float, ...], forecasts: list[Any]
) -> list[dict[str, Any]]:
    """Each forecast's first ``horizon`` steps as a response dict (timestamps when it has them,
    the requested quantiles when asked: read off a zero-shot model's own levels, interpolated
    between them, or taken from a distribution head's samples)."""
    out = []
    for f in forecasts:
        answer: dict[str, Any] = {}
        if f.timestamps is not None:
            answer["timestamps"] = f.timestamps[:horizon]
        answer["values"] = f.values[:horizon]
        if quantiles:
            if isinstance(f, ZeroShotForecast):  # its own levels: [q, h, c]
                levels = at_levels(quantiles, f.levels, f.quantiles[:, :horizon])
            else:
                levels = np.quantile(f.samples[:, :horizon], quantiles, axis=0)
            answer["quantiles"] = {
                f"{q:g}": level.tolist() for q, level in zip(quantiles, levels, strict=True)
            }
        out.append(answer)
    return out


def in_precisions(forecaster: Any, precisions: Sequence[str]) -> dict[str, Any]:
    """``forecaster`` (float32) converted to each of ``precisions`` it can run
    (``with_precision``); one it cannot is left out with a warning, so its requests get a 422
    naming the loaded ones."""
    out = {}
    for p in precisions:
        try:
            out[p] = forecaster if p == DEFAULT_PRECISION else forecaster.with_precision(p)
        except ValueError as exc:
            log.warning("%s: not served in %s: %s", forecaster.name, p, exc)
    if not out:
        raise ValueError(
            f"{forecaster.name} runs in none of the precisions {', '.join(precisions)}; "
            "add float32 to precisions"
        )
    return out


class ForecastServable(Servable):
    """Wraps a forecaster: an :class:`~models.informer.InformerForecaster` or an
    :class:`~models.hf_forecast.HFForecaster`, in each precision it can run of ``precisions``
    (the default first). Its backends are those the default precision's copy accepts, and
    requests are checked against that copy."""

    task = "forecast"
    zero_shot = False  # series of any length (ZeroShotServable), not a fixed window

    def __init__(self, forecaster: Any, precisions: Sequence[str] = (DEFAULT_PRECISION,)) -> None:
        models = in_precisions(forecaster, precisions)
        default = next(iter(models.values()))
        super().__init__(models, (), accepted_backends(default.check_attention))
        self.context: int = forecaster.context  # every window's length (zero-shot: the most)
        self.horizon = forecaster.horizon
        # The shipped figures do not change while serving: read once, asked per auto request.
        quality = self.model.quality
        self._losses: dict[Call, float] = {}
        for p in self.models:
            for b, loss in forecast_losses(quality, p).items():
                if b in self._backends:
                    self._losses[self.default_call(b, p)] = loss
            for b, options, loss in forecast_variant_losses(quality, p):
                if b in self._backends:  # a variant equal to the defaults keeps its figure
                    self._losses.setdefault(self.measured_call(b, options, p), loss)

    # ------------------------------------------------------------------ per request

    def check(self, request: ForecastInput) -> Checked:
        """Horizon, backend and options; the histories are checked as they are prepared."""
        precision = check_precision(request.precision, self.precisions(), self.name)
        horizon = self.model.check_horizon(request.horizon)
        backend = request.attention or self.default_attention
        options = self.model.check_attention(backend, dict(request.attention_options))
        call = self.call(backend, option_items(options), precision)
        if request.model_options and not self.zero_shot:
            raise ModelInputError(f"{self.name} takes no model_options (zero-shot forecasters do)")
        if request.quantiles and not self.model.probabilistic:
            raise ModelInputError(
                f"{self.name} gives point forecasts (no distribution head): leave out quantiles"
            )
        inline = request.steps <= INLINE_PREPARE_ROWS
        return Checked(call, request, inline, {"horizon": horizon})

    def prepare(self, checked: Checked) -> Work:
        """Validated windows, one per series; the error names the series index."""
        request: ForecastInput = checked.request
        windows = self.future_checked(self.windows(request.series, request.seed), checked)
        # Every window is cut to the model's context, so one length bucket per model.
        lengths = [self.context] * len(windows)
        finish = partial(cut_forecasts, checked.detail["horizon"], tuple(request.quantiles))
        return Work(windows, lengths, self.context, finish)

    def future_checked(self, windows: list[Any], checked: Checked) -> list[Any]:
        """``windows``, once the request's horizon after each fits the calendar; the error
        names the series index."""
        for i, window in enumerate(windows):
            try:
                self.model.check_future(window, checked.detail["horizon"])
            except ModelInputError as exc:
                raise ModelInputError(f"series {i}: {exc}") from None
        return windows

    def windows(self, series: Sequence[Mapping[str, Any]], seed: int = 0) -> list[Any]:
        """Mappings of the forecaster's ``prepare`` keyword arguments as windows; a
        probabilistic forecaster's series ``i`` samples with ``seed + i``."""
        probabilistic = self.model.probabilistic
        windows = []
        for i, s in enumerate(series):
            try:
                given = [k for k in EXTRA_INPUTS if s.get(k) is not None]
                refused = [k for k in given if k not in self.model.extra_inputs]
                if refused:
                    raise ModelInputError(f"{self.name} takes no {', '.join(refused)}")
                kwargs = dict(s)
                if probabilistic:
                    kwargs["seed"] = seed + i
                windows.append(self.model.prepare(**kwargs))
            except ModelInputError as exc:
                raise ModelInputError(f"series {i}: {exc}") from None
        return windows

    def run(self, rows: list[Any], call: Call) -> list[Any]:
        forecaster = self.models[call.precision]
        return forecaster.predict(rows, call.backend, call.options_dict, validated=True)

    # ------------------------------------------------------------------ operations

    def memory_estimate(self, call: Call, rows: int, length: int) -> int:
        # Every window is cut to the model's context: ``length`` is always the context.
        forecaster = self.models[call.precision]
        return forecaster.memory_estimate(call.backend, call.options_dict, rows)

    def quality_losses(self, length: int) -> dict[Call, float]:
        # Every window is cut to the model's context: the figures hold at any history length.
        return self._losses

    def figure_calls(self, backend: str) -> list[Call]:
        return [c for c in self._losses if c.backend == backend]

    def work_estimate(self, call: Call, rows: int, length: int) -> float:
        return self.model.work_estimate(call.backend, call.options_dict, rows)

    def calibration_batch(self, backend: str) -> tuple[list[Any], Call, int]:
        rows = [self._mean_window()] * CALIBRATION_WINDOWS
        return rows, self.default_call(backend), self.context

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], Call]]:
        window, call = self._mean_window(), self.default_call(backend)
        return [([window] * n, call) for n in self.model.warmup_batch_sizes(backend)]

    def _mean_window(self) -> Any:
        # A typical, always valid history the forecaster describes itself.
        (window,) = self.windows([self.model.sample_history()])
        return window

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        served, copies = self.compiled_copies(backends)
        for forecaster in copies:
            forecaster.compile(served, batch_buckets, mode, compiler)
