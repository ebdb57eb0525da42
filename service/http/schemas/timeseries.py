"""The bodies of the two drop-in forecast shapes, and the calendar arithmetic they share.

- SageMaker (``POST /invocations`` on a forecaster): the request and response of Chronos-2's
  SageMaker JumpStart endpoint, as its "Endpoint API" section documents them
  (amazon-science/chronos-forecasting, ``notebooks/deploy-chronos-to-amazon-sagemaker.ipynb``):
  ``{"inputs": [{"target", "item_id", "start", "past_covariates", "future_covariates"}],
  "parameters": {"prediction_length", "quantile_levels", "freq", ...}}``.
- KServe (``POST /v1/timeseries/forecast``): KServe's time series forecast API
  (kserve/website ``docs/reference/time_series/api.md``; the types in kserve/kserve
  ``python/kserve/kserve/protocol/rest/timeseries/types.py``).

Fields marked "attnserve extension" are this server's own (the attention backend and precision
each request may choose); both APIs leave room for extra parameters.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from service.http.schemas.common import Options, StrictRequest, attention_field, precision_field

Number = float | None  # null: a missing value
Covariates = dict[str, list[Number] | list[str]]
Level = Annotated[float, Field(gt=0, lt=1)]

# Chronos-2's endpoint answers these levels when a request names none (its API section).
SAGEMAKER_LEVELS = (0.1, 0.5, 0.9)


class _Extensions(BaseModel):
    """The per-request choices this server adds to a foreign shape (attnserve extensions)."""

    attention: str | None = attention_field(extension=True)
    attention_options: Options = Field(
        default_factory=dict, description="Backend options (attnserve extension)."
    )
    precision: str | None = precision_field()
    model_options: dict[str, Any] = Field(
        default_factory=dict,
        description="The model's own per-call options, as /forecast's (attnserve extension).",
    )


# ----------------------------------------------------------------------------- SageMaker


class SageMakerSeries(StrictRequest):
    """One series of Chronos-2's SageMaker payload."""

    target: list[Number] | list[list[Number]] = Field(
        description="The observed values: a list (one variate) or a list of lists, one per "
        "variate, all of one length (np.array(target) has shape [variates, length])."
    )
    item_id: str | None = Field(None, description="Echoed back with the forecast; unique.")
    start: str | None = Field(
        None,
        description="The first observation's timestamp (ISO: YYYY-MM-DD or "
        "YYYY-MM-DDThh:mm:ss); needs parameters.freq. The forecast's start is answered.",
    )
    past_covariates: Covariates | None = Field(
        None, description="Covariates by name, one value per target step (numbers or strings)."
    )
    future_covariates: Covariates | None = Field(
        None, description="Covariates known ahead, prediction_length values each."
    )


class SageMakerParameters(StrictRequest, _Extensions):
    """``parameters`` of Chronos-2's SageMaker payload, plus the attnserve extensions."""

    prediction_length: StrictInt = Field(1, ge=1, description="Steps to forecast (default 1).")
    quantile_levels: list[Level] | None = Field(
        None, max_length=99, description="Quantile levels to answer (default [0.1, 0.5, 0.9])."
    )
    freq: str | None = Field(
        None, max_length=32, description="The pandas frequency of the series, e.g. '1h', 'D'."
    )
    batch_size: StrictInt | None = Field(
        None, ge=1, description="Accepted for compatibility; the server's batcher decides."
    )
    predict_batches_jointly: bool = Field(
        False, description="Only false: each series is forecast on its own here."
    )


class SageMakerForecastRequest(StrictRequest):
    """Chronos-2's SageMaker payload."""

    inputs: list[SageMakerSeries] = Field(min_length=1, description="The series to forecast.")
    parameters: SageMakerParameters = Field(
        default_factory=lambda: SageMakerParameters.model_validate({}),
        description="Forecast settings.",
    )
    model: str | None = Field(
        None, max_length=512, description="Which forecaster (attnserve extension; or x-model)."
    )


# ----------------------------------------------------------------------------- KServe

# KServe's Frequency enum -> the calendar step it means (types.py's FREQUENCY_MAP).
KSERVE_STEPS: dict[str, tuple[str, int]] = {
    name: step
    for names, step in (
        (("second", "S"), ("seconds", 1)),
        (("minute", "T"), ("minutes", 1)),
        (("hour", "H"), ("hours", 1)),
        (("day", "D"), ("days", 1)),
        (("week", "W"), ("weeks", 1)),
        (("month", "M"), ("months", 1)),
        (("quarter", "Q"), ("months", 3)),
        (("year", "Y"), ("years", 1)),
    )
    for name in names
}
Frequency = Literal[
    "second", "S", "minute", "T", "hour", "H", "day", "D",
    "week", "W", "month", "M", "quarter", "Q", "year", "Y",
]  # fmt: skip
SeriesType = Literal["univariate_time_series", "multivariate_time_series"]


class _Open(BaseModel):
    """KServe's models allow extra fields (forward compatibility); types are not coerced."""

    model_config = ConfigDict(extra="allow", strict=True)


class KServeSeries(_Open):
    """One ``TimeSeriesInput``."""

    type: SeriesType
    name: str = Field(description="The series' name (unique in the request).")
    series: list[Number] | list[list[Number]] = Field(
        description="Univariate: a list; multivariate: a list of rows, the first dimension "
        "time and the second the variables."
    )
    frequency: Frequency
    start_timestamp: str | None = Field(None, description="ISO 8601 time of the first value.")


class KServeOptions(_Open, _Extensions):
    """``ForecastOptions``, plus the attnserve extensions."""

    horizon: StrictInt = Field(ge=1, description="Steps to forecast.")
    quantiles: list[Level] | None = Field(
        None, max_length=99, description="Quantile levels (none: the mean forecast only)."
    )


class KServeForecastRequest(_Open):
    """KServe's ``ForecastRequest``."""

    model: str = Field(max_length=512, description="Which forecaster.")
    inputs: list[KServeSeries] = Field(min_length=1)
    options: KServeOptions
    metadata: dict[str, Any] | None = None


class KServeForecast(_Open):
    type: SeriesType
    name: str
    mean_forecast: list[float] | list[list[float]]
    frequency: str
    start_timestamp: str | None = Field(
        description="The forecast's first time (null when the input gave no start_timestamp)."
    )
    quantiles: dict[str, list[float] | list[list[float]]] | None = None


class KServeOutput(_Open):
    type: str
    id: str
    status: str
    content: list[KServeForecast]


class KServeUsage(_Open):
    prompt_tokens: int = Field(description="History steps read (all series).")
    completion_tokens: int = Field(description="Steps forecast (all series).")
    total_tokens: int


class KServeForecastResponse(_Open):
    id: str
    created_at: int
    status: str
    model: str
    outputs: list[KServeOutput]
    usage: KServeUsage | None = None


# ----------------------------------------------------------------------------- calendar


def forecast_start(start: str, steps: int, step: pd.DateOffset) -> str:
    """The time ``steps`` steps of ``step`` after ``start``: the first forecast time of a
    history of ``steps`` values from ``start``, in ISO format (a ``Z`` kept as given).

    Raises:
        ValueError: ``start`` is not a timestamp, or the result is out of range.
    """
    first = pd.Timestamp(start)
    if first is pd.NaT:
        raise ValueError("not a timestamp")
    text = (first + step * steps).isoformat()
    return text.replace("+00:00", "Z") if start.endswith("Z") else text


def pandas_step(freq: str) -> pd.DateOffset:
    """The offset of a pandas frequency alias (``'1h'``, ``'D'``, ``'2W'``, ``'ME'``);
    ``ValueError`` when pandas knows no such alias."""
    return pd.tseries.frequencies.to_offset(freq)


def kserve_step(frequency: str) -> pd.DateOffset:
    """The step of one of KServe's frequencies (months and years as calendar steps)."""
    unit, n = KSERVE_STEPS[frequency]
    return pd.DateOffset(**{unit: n})
