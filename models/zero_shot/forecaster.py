"""What every zero-shot forecaster shares: series of any length in, quantiles out, attention
chosen per forward pass, priced per sequence length.

A zero-shot foundation forecaster (TimesFM 2.5, Chronos-2) reads any series, of one channel or
several, up to its context, and answers a fixed set of quantile levels without training per
dataset. It speaks the protocol the forecast servable serves (``prepare``, ``predict``, the
cost estimates, ``card``) like :class:`models.hf_forecast.forecaster.HFForecaster`, with two
differences the servable reads:

* a window's length varies (:attr:`ZeroShotWindow.tokens`): series batch with neighbours of a
  similar length, padded and masked, and each batch is priced at its own length;
* answers carry the model's quantile levels; a request's levels are read off them
  (:mod:`models.zero_shot.quantiles`).

A subclass says how its layers look at a length (:meth:`layer_shapes`, :meth:`attention_call`),
what the rest of a forward pass costs (:meth:`dense_work`, :meth:`dense_bytes`) and runs a
batch (:meth:`forecast`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.attention import AttentionCall, attention_bytes, attention_work, get_backend
from models.attention.base import InputSpec
from models.errors import ModelInputError
from models.hf_forecast.bridge import backend_scope, layer_choice
from models.hf_forecast.families import LayerShape
from models.hf_forecast.folder import Sidecar
from models.hf_forecast.inputs import read_clock
from models.informer.history import check_horizon, predict_call
from models.informer.model import LayerChoice, backend_cards
from models.informer.timefeatures import check_future_fits, format_timestamps
from models.names import DEFAULT_PRECISION
from models.precision import convert_network, needs_conversion, precision_of
from models.quality_file import backends_of, card_quality, read_quality
from models.zero_shot.quantiles import check_levels
from models.zero_shot.series import (
    ZeroShotForecast,
    ZeroShotWindow,
    read_covariates,
    read_target,
)

# Plans kept per (backend, options, length): the batcher prices every batch with one.
PLAN_CACHE_SIZE = 512


class ZeroShotForecaster:
    """The shared part; subclasses set the class attributes and the abstract methods."""

    kind: str = ""  # the folder kind (models.zero_shot.folder)
    architecture: str = ""
    patch: int = 1  # steps per token: a window's tokens are its steps over this, rounded up
    missing_values: str = ""  # what the model does with NaN (the card says it)
    extra_inputs: tuple[str, ...] = ()  # past_covariates / future_covariates when taken
    probabilistic = True
    default_attention = "flash"
    precisions: tuple[str, ...] = (DEFAULT_PRECISION,)  # what with_precision converts to

    def __init__(self, name: str, model: Any, directory: Path, sidecar: Sidecar) -> None:
        self.name = name
        self.model = model
        self.directory = directory
        self.sidecar = sidecar
        self.freq = sidecar.freq
        self.device = next(model.parameters()).device
        self.dtype: torch.dtype = next(model.parameters()).dtype
        self.precision = precision_of(self.dtype)
        self.compiled_backends: frozenset[str] = frozenset()
        self.quality = read_quality(directory / "quality.json")
        self._plans = functools.lru_cache(maxsize=PLAN_CACHE_SIZE)(self._layer_plan)

    # ------------------------------------------------------------------ subclass hooks

    context: int  # the most history steps read (older steps are dropped)
    horizon: int  # the most steps one forward pass answers
    levels: tuple[float, ...]  # the quantile levels answered, ascending

    def layer_shapes(self, tokens: int) -> list[LayerShape]:
        """Every attention layer's call at ``tokens`` tokens of history."""
        raise NotImplementedError

    def attention_call(
        self, layer: LayerShape, rows: int, itemsize: int, device: str
    ) -> AttentionCall:
        """``layer``'s call over ``rows`` windows."""
        raise NotImplementedError

    def dense_work(self, rows: int, tokens: int) -> float:
        """Flop-equivalents of everything but attention for ``rows`` windows."""
        raise NotImplementedError

    def dense_bytes(self, rows: int, tokens: int, itemsize: int) -> int:
        """Peak activation bytes of everything but attention for ``rows`` windows."""
        raise NotImplementedError

    def forecast(
        self, windows: list[ZeroShotWindow], horizon: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per window, ``(point [H, c], quantiles [len(levels), H, c])`` in original units for
        ``horizon`` steps; runs inside the batch's :func:`backend_scope`."""
        raise NotImplementedError

    def check_series(self, window: ZeroShotWindow, name: str) -> None:
        """Model-specific checks of a prepared window (covariates it takes, say)."""

    def read_options(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """A request's ``model_options`` checked, over the model's defaults."""
        if given:
            raise ModelInputError(f"{self.name} takes no model_options")
        return {}

    def group_key(self, window: ZeroShotWindow) -> tuple[Any, ...]:
        """Windows run in one forward pass only when their keys are equal: the same length in
        tokens (so no window is padded by whole tokens to a neighbour's length, and an
        approximate backend's blocks, landmarks, samples or buckets never depend on the batch)
        and the same options the class takes per call rather than per row."""
        return (window.tokens, tuple(sorted(window.model_options.items())))

    # ------------------------------------------------------------------ input validation

    def tokens_of(self, steps: int) -> int:
        """Tokens a history of ``steps`` steps runs as (its last :attr:`context` steps)."""
        return math.ceil(min(steps, self.context) / self.patch)

    def prepare(
        self,
        timestamps: Sequence[str] | None = None,
        values: Any = None,
        *,
        start: str | None = None,
        columns: Mapping[str, Sequence[float]] | None = None,
        past_covariates: Mapping[str, Sequence[Any]] | None = None,
        future_covariates: Mapping[str, Sequence[Any]] | None = None,
        item_id: str | None = None,
        model_options: Mapping[str, Any] | None = None,
        horizon: int | None = None,
        seed: int = 0,
    ) -> ZeroShotWindow:
        """Validate one series (``values`` rows or named ``columns``; any length of at least one
        observed value per channel) into a window of its last :attr:`context` steps.

        Raises:
            ModelInputError: malformed or infinite values, a channel with nothing observed,
                uneven timestamps, covariates the model does not take or of the wrong length.
        """
        name = "series" if item_id is None else f"series {item_id!r}"
        if (values is None) == (columns is None):
            raise ModelInputError("give the history as either 'values' (rows) or 'columns'")
        if columns is not None:
            if not isinstance(columns, Mapping) or not columns:
                raise ModelInputError("columns must map each channel name to its values")
            lengths = {len(c) for c in columns.values()}
            if len(lengths) != 1:
                raise ModelInputError(f"{name}: every column must have the same length")
            values = np.stack([np.asarray(c, dtype=np.float64) for c in columns.values()], 1)
        raw = read_target(values, name)
        steps = len(raw)
        if timestamps is not None and start is not None:
            raise ModelInputError("give either 'timestamps' or 'start', not both")
        last, step = read_clock(timestamps, start, steps, self.freq, self.name)
        given = [
            k
            for k, v in (
                ("past_covariates", past_covariates),
                ("future_covariates", future_covariates),
            )
            if v
        ]
        refused = [k for k in given if k not in self.extra_inputs]
        if refused:
            raise ModelInputError(
                f"{self.name} takes no {', '.join(refused)} ({self.architecture})"
            )
        want = self.check_horizon(horizon)
        window = ZeroShotWindow(
            raw[-self.context :].astype(np.float32),
            self.tokens_of(steps),
            read_covariates(past_covariates, steps, name, "past_covariates"),
            read_covariates(future_covariates, want, name, "future_covariates"),
            last,
            step,
            item_id,
            self.read_options(model_options),
            want,
        )
        for key, column in window.past_covariates.items():
            window.past_covariates[key] = column[-self.context :]
        self.check_series(window, name)
        return window

    def check_horizon(self, horizon: int | None) -> int:
        """The horizon to return (the model's when None); ``ModelInputError`` beyond it."""
        return check_horizon(horizon, self.horizon, self.name)

    def check_quantiles(self, wanted: Sequence[float]) -> None:
        """``ModelInputError`` for a level outside the model's levels."""
        check_levels(wanted, self.levels, self.name)

    def check_future(self, window: ZeroShotWindow, steps: int) -> None:
        """``ModelInputError`` when ``steps`` forecasts after ``window`` pass the largest date."""
        check_future_fits(window.last_timestamp, steps, window.step_seconds)

    # ------------------------------------------------------------------ attention and cost

    def check_attention(self, backend: str, options: dict | None = None) -> dict:
        """Resolved options for ``backend``; ``AttentionError`` if the name or an option is
        invalid."""
        return get_backend(backend).resolve_options(dict(options or {}))

    def plan(
        self, backend: str, options: dict | None = None, tokens: int | None = None
    ) -> dict[str, LayerChoice]:
        """What each attention layer runs at ``tokens`` (the full context when None), as the
        bridge decides at run time."""
        n = self.tokens_of(self.context) if tokens is None else tokens
        return self._plans(backend, tuple(sorted((options or {}).items())), n)

    def _layer_plan(
        self, backend: str, items: tuple[tuple[str, Any], ...], tokens: int
    ) -> dict[str, LayerChoice]:
        resolved = {
            k: v for k, v in self.check_attention(backend, dict(items)).items() if v is not None
        }
        out = {}
        for layer in self.layer_shapes(tokens):
            call = self.attention_call(layer, 1, self.dtype.itemsize, self.device.type)
            spec = InputSpec(
                layer.lq,
                layer.lk,
                call.d,
                self.dtype,
                self.device.type,
                causal=layer.causal,
                has_padding_mask=True,
            )
            out[layer.name] = layer_choice(backend, resolved, spec)
        return out

    def work_estimate(
        self, backend: str, options: dict | None = None, rows: int = 1, tokens: int | None = None
    ) -> float:
        """Flop-equivalents of :meth:`predict` on ``rows`` windows of ``tokens`` tokens."""
        n = self.tokens_of(self.context) if tokens is None else tokens
        plan = self.plan(backend, options, n)
        attention = sum(
            attention_work(
                plan[s.name].backend,
                self.attention_call(s, rows, self.dtype.itemsize, self.device.type),
                plan[s.name].options,
            )
            for s in self.layer_shapes(n)
        )
        return self.dense_work(rows, n) + attention

    def memory_estimate(
        self, backend: str, options: dict | None = None, rows: int = 1, tokens: int | None = None
    ) -> int:
        """Peak activation bytes of :meth:`predict` on ``rows`` windows of ``tokens`` tokens:
        the layer widths alive at once plus the largest attention kernel's own peak."""
        n = self.tokens_of(self.context) if tokens is None else tokens
        plan, itemsize = self.plan(backend, options, n), self.dtype.itemsize
        kernel = max(
            (
                attention_bytes(
                    plan[s.name].backend,
                    self.attention_call(s, rows, itemsize, self.device.type),
                    plan[s.name].options,
                )
                for s in self.layer_shapes(n)
            ),
            default=0,
        )
        return self.dense_bytes(rows, n, itemsize) + kernel

    def with_precision(self, precision: str) -> ZeroShotForecaster:
        """This forecaster in ``precision``: itself in its own, else a new forecaster over a
        converted copy of the network (:func:`models.precision.convert_network`), for the
        precisions its class lists in :attr:`precisions` (the others' quantiles against
        float32 are unmeasured: the server leaves them out with a warning, and a request for one
        gets a 422 naming the loaded ones).

        Raises:
            ValueError: a precision the class does not run, or this forecaster is not float32.
        """
        if precision == self.precision:
            return self
        if precision not in self.precisions:
            raise ValueError(
                f"{self.kind} runs in {', '.join(self.precisions)} here, not {precision}"
            )
        needs_conversion(self.precision, precision)  # from float32 only
        model = convert_network(self.model, precision)
        return type(self)(self.name, model, self.directory, self.sidecar)

    def warmup_batch_sizes(self, backend: str) -> list[int]:
        return [2]

    def compile(self, backends: list[str], *args: Any, **kwargs: Any) -> None:
        """Zero-shot forecasters are served eagerly (``torch.compile`` is not wired for them)."""

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def predict(
        self,
        windows: list[ZeroShotWindow],
        backend: str | None = None,
        options: dict | None = None,
        horizon: int | None = None,
        validated: bool = False,
    ) -> list[ZeroShotForecast]:
        """Forecast every window with ``backend`` at ``horizon`` steps (the model's when None).
        A window's answer depends on that window alone, not on the rest of the batch."""
        backend, resolved, steps = predict_call(self, backend, options, horizon, validated)
        if not windows:
            return []
        opts = {k: v for k, v in (resolved or {}).items() if v is not None}
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, w in enumerate(windows):
            groups.setdefault(self.group_key(w), []).append(i)
        answers: list[Any] = [None] * len(windows)
        with backend_scope(backend, opts):
            for members in groups.values():
                got = self.forecast([windows[i] for i in members], steps)
                for i, answer in zip(members, got, strict=True):
                    answers[i] = answer
        out = []
        for w, (point, quantiles) in zip(windows, answers, strict=True):
            stamps = None
            if w.last_timestamp is not None and w.step_seconds is not None:
                offsets = np.arange(1, steps + 1, dtype=np.int64) * w.step_seconds
                stamps = format_timestamps(w.last_timestamp + offsets.astype("timedelta64[s]"))
            out.append(
                ZeroShotForecast(stamps, point[:steps].tolist(), self.levels, quantiles, w.item_id)
            )
        return out

    # ------------------------------------------------------------------ description

    def sample_history(self) -> dict[str, Any]:
        """A valid request series for warm-up and calibration: a gentle wave around 1 over the
        whole context."""
        t = np.arange(self.context, dtype=np.float64)
        return {"values": (1.0 + 0.1 * np.sin(t / 8.0))[:, None]}

    def card(self) -> dict[str, Any]:
        """Everything ``GET /models`` shows about this model."""
        card: dict[str, Any] = {
            "name": self.name,
            "task": "forecast",
            "source": "zero-shot",
            "kind": self.kind,
            "architecture": self.architecture,
            "class": type(self.model).__name__,
            "context": self.context,
            "horizon": self.horizon,
            "patch": self.patch,
            "channels": "any (each series its own width)",
            "freq": self.freq,
            "timestamps": "optional; when given, evenly spaced, and the forecast continues them",
            "units": "original (the model scales each series itself)",
            "missing_values": self.missing_values,
            "covariates": list(self.extra_inputs),
            "default_attention": self.default_attention,
            "precisions": list(self.precisions),
            "head": {
                "kind": "quantiles",
                "levels": list(self.levels),
                "quantiles": "the model's own levels; levels between them interpolated "
                "linearly, levels outside refused",
            },
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "backends": backend_cards(self.plan, backends_of(self.quality)),
            "quality": card_quality(self.quality),
        }
        return card
