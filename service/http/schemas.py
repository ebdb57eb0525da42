"""Request and response bodies (pydantic). Shape checks live here; checks that need the model
(token limits, context length, channels, timestamps, backends) happen in the engine before queueing.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    model_validator,
)
from pydantic.functional_validators import WrapValidator
from pydantic_core import PydanticCustomError, to_json

from models.quality_loss import DEFAULT_MAX_QUALITY_LOSS

Options = dict[str, Any]


def _checked_array(ndim: int) -> WrapValidator:
    """Numbers nested ``ndim`` deep as a float64 array (see :func:`number_array`), or a float64
    array of ``ndim`` dimensions let through as it is: JSON never holds one, only the
    body-parsing helper (``service.http.body_pool``) puts them there, after validating the very lists
    they were built from, so the event loop does not walk the numbers a second time."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _packed_or(value, handler, ndim)

    return WrapValidator(validate)


def _packed_or(value: Any, handler: ValidatorFunctionWrapHandler, ndim: int) -> Any:
    """``value`` itself when it is a float64 array of ``ndim`` dimensions, lists of numbers as
    such an array, anything else validated (pydantic's strict walk names what is wrong)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim == ndim:
        return value
    array = number_array(value, ndim)
    return array if array is not None else handler(value)


# Past this share of elements equal to 0 or 1, looking at each one for a bool costs more than
# pydantic's strict walk of them all.
_MAX_SUSPECT_SHARE = 1 / 8
_NUMBER_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))


def number_array(value: Any, ndim: int) -> np.ndarray | None:
    """``value``, lists nested ``ndim`` (1 or 2) deep of nothing but numbers (a history: one
    column or the rows), as a float64 array built in one C-level pass, instead of pydantic
    checking each number as a Python object and the forecaster converting them again. None for
    anything else (strings, nulls, nested or ragged lists, integers past int64): pydantic's
    strict walk then refuses or accepts it as before.

    numpy reads JSON ``true``/``false`` as 1 and 0, which the strict schema refuses: the
    elements equal to 0 or 1 (few in real data) are looked at one by one, and a value with many
    of them is left to pydantic."""
    if not isinstance(value, list):
        return None
    try:
        array = np.array(value)
    except (ValueError, TypeError, OverflowError):
        return None
    if array.ndim != ndim or array.dtype not in _NUMBER_DTYPES:
        return None
    if array.dtype != np.float64:
        array = array.astype(np.float64)
    suspects = np.flatnonzero((array == 0.0) | (array == 1.0))
    if suspects.size > _MAX_SUSPECT_SHARE * array.size:
        return None
    if ndim == 1:
        if any(type(value[i]) is bool for i in suspects.tolist()):
            return None
    else:
        width = array.shape[1]
        if any(type(value[i // width][i % width]) is bool for i in suspects.tolist()):
            return None
    return array


def _array_or_list(numbers: Any, ndim: int) -> Any:
    """``numbers`` as a float64 array when they form one of ``ndim`` dimensions, else as given."""
    try:
        array = np.asarray(numbers, dtype=np.float64)
    except ValueError:
        return numbers
    return array if array.ndim == ndim else numbers


def decode_float32(text: str) -> np.ndarray:
    """A base64 string of little-endian float32 values (the ``encoding_format: base64`` of
    embeddings, here for inputs) as a float64 array; ``ValueError`` says what is wrong."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "a column given as a string must be base64 (standard alphabet, padded) of "
            "little-endian float32 values"
        ) from None
    if len(raw) % 4:
        raise ValueError(
            f"a base64 column holds {len(raw)} bytes, not a whole number of float32 values "
            "(4 bytes each)"
        )
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


def _column() -> WrapValidator:
    """A column as JSON numbers (validated as usual), as base64 float32 (decoded here, without
    a number walk), or as the float64 array the body-parsing helper packed."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, str):
            try:
                return decode_float32(value)
            except ValueError as exc:
                raise PydanticCustomError("base64_column", str(exc)) from None
        return _packed_or(value, handler, ndim=1)

    return WrapValidator(validate)


# A history as rows or as one column; typed as what a client sends (the OpenAPI schema).
FloatRows = Annotated[list[list[float]], _checked_array(2)]
FloatColumn = Annotated[
    list[float] | str,
    _column(),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "number"}},
                {"type": "string", "contentEncoding": "base64"},
            ],
            "description": "Numbers, or base64 of their little-endian float32 bytes.",
        }
    ),
]


class _Request(BaseModel):
    # strict: a number sent as a string ("24"), a bool as 0/1 are refused, not coerced.
    model_config = ConfigDict(extra="forbid", strict=True)


# ----------------------------------------------------------------------------- errors


class ErrorDetail(BaseModel):
    type: str = Field(description="Machine-readable error type (see the error table).")
    message: str = Field(description="What was wrong and how to fix it.")


class ErrorBody(BaseModel):
    """The one error body of every non-2xx response."""

    error: ErrorDetail


# The error statuses a model route can answer, for the OpenAPI schema (``responses=``).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 404, 413, 422, 429, 503, 504, 507)
}


def quality_budget(metric: str, task: str) -> Any:
    """The ``max_quality_loss`` field of ``task``, whose quality loss is ``metric``."""
    default = DEFAULT_MAX_QUALITY_LOSS[task]
    return Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="With attention 'auto': the most quality loss against exact attention the "
        f"server may trade for speed ({metric}; default {default}). Only with 'auto'.",
    )


# ----------------------------------------------------------------------------- encode


LongText = Literal["error", "truncate", "windows"]
LONG_TEXT_HELP = (
    "A text over the model's token limit: error (a 422 naming it), truncate (keep its first "
    "tokens), or windows (embed all of it as overlapping windows at the limit, averaged by "
    "their tokens)."
)


class EncodeRequest(_Request):
    inputs: str | list[str] = Field(
        description="A text or a list of texts.", examples=[["first text", "second text"]]
    )
    model: str | None = Field(None, description="Encoder name; the only loaded encoder if omitted.")
    attention: str | None = Field(
        None,
        description="Attention backend (full, flash, probsparse, performer, nystrom), or auto: "
        "the fastest within max_quality_loss.",
    )
    attention_options: Options = Field(
        default_factory=dict, description="Options of the backend (see GET /models)."
    )
    max_quality_loss: float | None = quality_budget(
        "1 - mean cosine to the exact embedding", "encode"
    )
    normalize: StrictBool | None = Field(
        None,
        description="Scale each embedding to unit length; default: as the model does (its "
        "folder's Normalize module; all-MiniLM-L6-v2: true).",
    )
    truncate: StrictBool = Field(
        False,
        description="Cut texts over the token limit instead of refusing them (long_text=truncate).",
    )
    long_text: LongText | None = Field(
        None, description=LONG_TEXT_HELP + " Default: truncate when truncate=true, else error."
    )

    @model_validator(mode="after")
    def _one_long_text_rule(self) -> EncodeRequest:
        if self.truncate and self.long_text not in (None, "truncate"):
            raise ValueError(
                f"truncate=true and long_text={self.long_text} contradict each other; send one"
            )
        return self

    @property
    def long_text_rule(self) -> str:
        """``error``, ``truncate`` or ``windows``, from ``long_text`` or ``truncate``."""
        return self.long_text or ("truncate" if self.truncate else "error")

    prompt_name: str | None = Field(
        None,
        description="One of the model's named prompts (see GET /models), prepended to every "
        "text; default: the model's default prompt, if it has one.",
    )


class Usage(BaseModel):
    tokens: int = Field(description="Tokens the model read, special tokens included.")


class EncodeResponse(BaseModel):
    model: str
    attention: str
    embeddings: list[list[float]]
    usage: Usage


# ----------------------------------------------------------------------------- OpenAI embeddings


class EmbeddingsRequest(_Request):
    """OpenAI ``POST /v1/embeddings``, plus the ``attention``/``attention_options`` extension."""

    input: str | list[str] = Field(description="A text or a list of texts.")
    model: str = Field(description="Encoder name, e.g. all-MiniLM-L6-v2.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: little-endian float32 bytes."
    )
    dimensions: int | None = Field(
        None, description="Accepted only when equal to the model's dimension (no shortening)."
    )
    user: str | None = Field(None, description="Ignored (OpenAI compatibility).")
    attention: str | None = Field(None, description="Attention backend or auto (extension).")
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    max_quality_loss: float | None = quality_budget(
        "1 - mean cosine to the exact embedding", "encode"
    )
    prompt_name: str | None = Field(
        None, description="One of the model's named prompts, prepended to every text (extension)."
    )
    long_text: LongText = Field("error", description=LONG_TEXT_HELP + " (extension)")


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingsUsage


# ----------------------------------------------------------------------------- forecast


class Series(_Request):
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
            out["values"] = _array_or_list(self.values, ndim=2)
        if self.columns is not None:
            out["columns"] = {name: _array_or_list(c, ndim=1) for name, c in self.columns.items()}
        return out


class ForecastRequest(_Request):
    model: str = Field(description="Forecaster name, e.g. informer-etth1-h24.")
    series: list[Series] = Field(description="Histories to forecast; each is one batch row.")
    horizon: int | None = Field(None, description="Steps to return (at most the model's horizon).")
    attention: str | None = Field(
        None, description="Attention backend, or auto: the fastest within max_quality_loss."
    )
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    max_quality_loss: float | None = quality_budget("relative test-MSE increase", "forecast")
    quantiles: list[Annotated[float, Field(gt=0, lt=1)]] | None = Field(
        None,
        max_length=99,
        description="Probabilistic models only (card `head.kind` = distribution): quantiles "
        "of the forecast distribution to return beside its mean, e.g. [0.1, 0.5, 0.9].",
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
    horizon: int
    forecasts: list[ForecastOut]


def forecast_json(
    model: str, attention: str, horizon: int, forecasts: list[dict[str, Any]]
) -> bytes:
    """A :class:`ForecastResponse` body, rendered straight from the forecasts (dicts of
    ``timestamps``: strings and ``values``: rows of floats, which the forecaster builds) without
    validating them into models first: the bytes FastAPI would write for the model (compact,
    UTF-8, non-finite numbers as ``null``)."""
    return to_json(
        {"model": model, "attention": attention, "horizon": horizon, "forecasts": forecasts},
        inf_nan_mode="null",
    )


# ----------------------------------------------------------------------------- models, health


class ModelsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]] = Field(description="One card per loaded model.")


class Health(BaseModel):
    status: str
    detail: str = ""
