"""The Informer forecaster as a servable: windows prepared up front (validation), predicted in
batches at the model's full horizon and cut to each request's horizon afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from models.errors import ModelInputError
from models.informer import Forecast, ForecastWindow, InformerForecaster
from models.informer.timefeatures import freq_step
from service.servables.base import accepted_backends, canonical_options


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
        self.channels = list(forecaster.channels)
        self.freq = forecaster.freq
        self._backends = accepted_backends(self.forecaster.check_attention)

    def backends(self) -> list[str]:
        return list(self._backends)

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        return canonical_options(self.forecaster.check_attention(backend, dict(options or {})))

    def check_horizon(self, horizon: int | None) -> int:
        """The horizon to return (the model's when None); ``ModelInputError`` when out of range."""
        return self.forecaster._check_horizon(horizon)

    def prepare(self, series: list[Mapping[str, Any]]) -> list[ForecastWindow]:
        """Validate every series (mappings of :meth:`InformerForecaster.prepare`'s keyword
        arguments: ``timestamps`` or ``start``, ``values`` or ``columns``); the error names the
        series index."""
        windows = []
        for i, s in enumerate(series):
            try:
                windows.append(self.forecaster.prepare(**s))
            except ModelInputError as exc:
                raise ModelInputError(f"series {i}: {exc}") from None
        return windows

    def run(
        self, rows: list[Any], backend: str, options: dict[str, Any], variant: tuple[Any, ...]
    ) -> list[Any]:
        return self.forecaster.predict(rows, backend, options)

    def memory_estimate(self, backend: str, options: dict[str, Any], rows: int, length: int) -> int:
        # Every window is cut to the model's context: ``length`` is always the context.
        return self.forecaster.memory_estimate(backend, options, rows)

    @staticmethod
    def cut(forecast: Forecast, horizon: int) -> dict[str, Any]:
        """A forecast's first ``horizon`` steps as a response dict."""
        return {"timestamps": forecast.timestamps[:horizon], "values": forecast.values[:horizon]}

    def warmup_rows(self) -> tuple[list[Any], tuple[Any, ...]]:
        # The training mean at regular timestamps: always a valid, in-range history.
        index = pd.date_range(
            "2017-01-02 00:00:00", periods=self.context, freq=freq_step(self.freq)
        )
        mean = np.asarray(self.forecaster.scaler.mean, dtype=np.float64)
        values = np.tile(mean, (self.context, 1)).tolist()
        stamps = [t.strftime("%Y-%m-%d %H:%M:%S") for t in index]
        return self.prepare([{"timestamps": stamps, "values": values}]) * 2, ()

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], tuple[Any, ...]]]:
        rows, variant = self.warmup_rows()
        return [(rows[:1] * n, variant) for n in self.forecaster.warmup_batch_sizes(backend)]

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        served = [b for b in backends if b in self._backends]
        if served:
            self.forecaster.compile(served, batch_buckets, mode, compiler)

    def card(self) -> dict[str, Any]:
        card = self.forecaster.card()
        card["aliases"] = list(self.aliases)
        card["served_backends"] = self.backends()
        return card
