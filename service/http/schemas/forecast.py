"""The bodies of ``POST /forecast``: histories as rows or columns, forecasts rendered straight
to JSON."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictInt
from pydantic_core import to_json

from models.names import DEFAULT_PRECISION
from service.http.schemas.arrays import FloatColumn, FloatRows, array_or_list
from service.http.schemas.common import (
    Options,
    StrictRequest,
    attention_field,
    precision_field,
    precision_out,
    quality_budget,
)


class Series(StrictRequest):
    """One history, as rows or as columns (the compact form for long histories). Which fields
    must come together is checked once, by the forecaster's ``prepare`` (a 422 naming the
    series)."""

    timestamps: list[str] | None = Field(
        None,
        description="One timestamp per row, regular at the model's frequency, e.g. "
        "'2017-10-24 00:00:00'. Or give `start`. Optional for models without a calendar "
        "(transformers folders): the forecast then has values only.",
    )
    start: str | None = Field(
        None,
        description="The first row's timestamp; the others follow at the model's step "
        "(instead of `timestamps`).",
    )
    values: FloatRows | None = Field(
        None, description="Rows of the model's channels in original units (oldest first)."
    )
    columns: dict[str, FloatColumn] | None = Field(
        None,
        description="Instead of `values`: each channel's history by name, oldest first "
        "(columnar: about a fifth of the parsing cost of rows for long histories), as numbers "
        "or as a base64 string of little-endian float32 bytes (cheaper still: no numbers to "
        "parse, a quarter of the bytes).",
    )
    time_features: FloatRows | None = Field(
        None,
        description="Encoder-decoder transformers models only (their card lists "
        "`time_features`): the covariates they were trained with, one row per history row "
        "and per forecast step after it.",
    )
    static_categorical: list[StrictInt] | None = Field(
        None, description="The series' static categorical features (models that use them)."
    )
    static_real: list[float] | None = Field(
        None, description="The series' static real features (models that use them)."
    )
    past_covariates: dict[str, list[float | None] | list[str]] | None = Field(
        None,
        description="Zero-shot forecasters that take covariates (card `covariates`): each "
        "covariate by name, one value per history row, numbers (null: missing) or strings "
        "(a categorical covariate).",
    )
    future_covariates: dict[str, list[float | None] | list[str]] | None = Field(
        None,
        description="Covariates known in advance, one value per forecast step (`horizon` "
        "values); each must also be a past covariate.",
    )

    def rows(self) -> int:
        """Steps of history given."""
        if self.values is not None:
            return len(self.values)
        return max((len(c) for c in (self.columns or {}).values()), default=0)

    def packed(self) -> dict[str, Any]:
        """The fields given, the numbers as float64 arrays (rows only when all have the same
        length: a ragged history stays a list, so the forecaster's 422 can name the row)."""
        out = self.model_dump(exclude_unset=True, exclude={"values", "columns"})
        if self.values is not None:
            out["values"] = array_or_list(self.values, ndim=2)
        if self.columns is not None:
            out["columns"] = {name: array_or_list(c, ndim=1) for name, c in self.columns.items()}
        return out


class ForecastRequest(StrictRequest):
    model: str = Field(description="Forecaster name, e.g. informer-etth1-h24.")
    series: list[Series] = Field(description="Histories to forecast; each is one batch row.")
    horizon: int | None = Field(None, description="Steps to return (at most the model's horizon).")
    attention: str | None = attention_field()
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    max_quality_loss: float | None = quality_budget("relative test-MSE increase", "forecast")
    precision: str | None = precision_field()
    quantiles: list[Annotated[float, Field(gt=0, lt=1)]] | None = Field(
        None,
        max_length=99,
        description="Probabilistic models only (card `head.kind` = distribution): quantiles "
        "of the forecast distribution to return beside its mean, e.g. [0.1, 0.5, 0.9].",
    )
    model_options: dict[str, Any] = Field(
        default_factory=dict,
        description="The model's own per-call options (zero-shot forecasters; card "
        "`model_options`), e.g. TimesFM 2.5's window_size, force_flip_invariance and "
        "truncate_negative.",
    )
    seed: StrictInt = Field(
        0,
        ge=0,
        lt=2**63,
        description="Sampling seed of probabilistic models (series i samples with seed + i): "
        "the same request gives the same quantiles, whatever it is batched with.",
    )

    def packed(self) -> dict[str, Any]:
        """This request as the body-parsing helper hands it to the event loop: the histories'
        numbers as arrays (:meth:`Series.packed`), which re-validate without a walk."""
        out = self.model_dump(exclude_unset=True, exclude={"series"})
        out["series"] = [s.packed() for s in self.series]
        return out


class ForecastOut(BaseModel):
    timestamps: list[str] | None = Field(
        None, description="The forecast's times (left out when the request gave none)."
    )
    values: list[list[float]] = Field(
        description="Rows of the channels, one per step (a probabilistic model's mean)."
    )
    quantiles: dict[str, list[list[float]]] | None = Field(
        None, description="Per requested quantile (key as given, e.g. '0.1'): rows as values."
    )


class ForecastResponse(BaseModel):
    model: str
    attention: str
    precision: str = precision_out()
    horizon: int
    forecasts: list[ForecastOut]


def forecast_json(
    model: str,
    attention: str,
    horizon: int,
    forecasts: list[dict[str, Any]],
    precision: str = DEFAULT_PRECISION,
) -> bytes:
    """A :class:`ForecastResponse` body, rendered straight from the forecasts (dicts of
    ``timestamps``: strings and ``values``: rows of floats, which the forecaster builds) without
    validating them into models first: the bytes FastAPI would write for the model (compact,
    UTF-8, non-finite numbers as ``null``)."""
    return to_json(
        {
            "model": model,
            "attention": attention,
            "precision": precision,
            "horizon": horizon,
            "forecasts": forecasts,
        },
        inf_nan_mode="null",
    )
