"""One request series for a zero-shot forecaster, checked: a target of any length (one channel
or several, NaN for a missing value), covariates by name, an optional clock. What each model
does with a missing value is its own rule (:attr:`ZeroShotForecaster.missing_values`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.errors import ModelInputError

Covariate = np.ndarray  # [steps] float32 (numeric) or object (categorical: strings)


@dataclass
class ZeroShotWindow:
    """One validated series, ready to batch.

    Attributes:
        target: ``[steps, channels]`` float32 in original units, NaN where a value is missing,
            already cut to the model's context.
        tokens: the sequence length the model runs for it (patches): batching and pricing.
        past_covariates: name -> one value per target step (numbers or category strings).
        future_covariates: name -> one value per forecast step (known in advance).
        last_timestamp, step_seconds: the clock the forecast continues (None without one).
        item_id: the caller's name for the series, echoed back (SageMaker, KServe).
        model_options: the model's own per-call options (checked, over its defaults).
        horizon: the steps the request asked for (Chronos-2's answer depends on it).
    """

    target: np.ndarray
    tokens: int
    past_covariates: dict[str, Covariate] = field(default_factory=dict)
    future_covariates: dict[str, Covariate] = field(default_factory=dict)
    last_timestamp: np.datetime64 | None = None
    step_seconds: int | None = None
    item_id: str | None = None
    model_options: dict[str, Any] = field(default_factory=dict)
    horizon: int = 0


@dataclass
class ZeroShotForecast:
    """A forecast in original units: the point forecast and the model's own quantile levels.

    Attributes:
        timestamps: the forecast's times (None when the request gave no clock).
        values: ``[H, channels]`` point forecast (each model says which statistic it is).
        levels: the quantile levels the model answers, ascending.
        quantiles: ``[len(levels), H, channels]``.
    """

    timestamps: list[str] | None
    values: list[list[float]]
    levels: tuple[float, ...]
    quantiles: np.ndarray
    item_id: str | None = None


def read_target(values: Any, name: str) -> np.ndarray:
    """``values`` (rows of one or more channels, or a flat list for one channel) as a float64
    array ``[steps, channels]``. NaN (JSON null) is a missing value; infinity is refused."""
    try:
        raw = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelInputError(
            f"{name}: values must be rows of numbers of one width (null for a missing value)"
        ) from None
    if raw.ndim == 1:
        raw = raw[:, None]
    if raw.size == 0:
        raise ModelInputError(f"{name}: values is empty; send at least one row")
    if raw.ndim != 2 or raw.shape[1] == 0:
        raise ModelInputError(
            f"{name}: values must be rows of numbers of one width, got shape {list(raw.shape)}"
        )
    if np.isinf(raw).any():
        r, c = np.argwhere(np.isinf(raw))[0]
        raise ModelInputError(
            f"{name}: row {int(r)}, channel {int(c)} is infinite; values must be finite "
            "(null marks a missing value)"
        )
    if np.isnan(raw).all(axis=0).any():
        c = int(np.argwhere(np.isnan(raw).all(axis=0))[0][0])
        raise ModelInputError(f"{name}: channel {c} has no observed value (all null)")
    return raw


def read_covariates(
    given: Mapping[str, Sequence[Any]] | None, steps: int, name: str, field_name: str
) -> dict[str, Covariate]:
    """Covariates by name, each exactly ``steps`` values: all numbers (null: missing) or all
    strings (a categorical covariate)."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ModelInputError(f"{name}: {field_name} must map each covariate name to its values")
    out: dict[str, Covariate] = {}
    for key, column in given.items():
        where = f"{name}: {field_name}[{key!r}]"
        if not isinstance(column, list | tuple | np.ndarray):
            raise ModelInputError(f"{where} must be a list of values")
        if len(column) != steps:
            raise ModelInputError(f"{where} has {len(column)} values; it needs {steps}")
        if len(column) and all(isinstance(v, str) for v in column):
            out[key] = np.asarray(column, dtype=object)
            continue
        try:
            numbers = np.asarray([np.nan if v is None else v for v in column], dtype=np.float64)
        except (TypeError, ValueError):
            raise ModelInputError(
                f"{where} must be all numbers (null: missing) or all strings (categories)"
            ) from None
        if np.isinf(numbers).any():
            raise ModelInputError(f"{where} has an infinite value")
        out[key] = numbers.astype(np.float32)
    return out
