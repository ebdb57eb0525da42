"""Request and response bodies (pydantic). Shape checks live here; checks that need the model
(token limits, context length, channels, timestamps, backends) happen in the engine before queueing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

Options = dict[str, Any]


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


# ----------------------------------------------------------------------------- encode


class EncodeRequest(_Request):
    inputs: str | list[str] = Field(
        description="A text or a list of texts.", examples=[["first text", "second text"]]
    )
    model: str | None = Field(None, description="Encoder name; the only loaded encoder if omitted.")
    attention: str | None = Field(
        None, description="Attention backend (full, flash, probsparse, performer, nystrom)."
    )
    attention_options: Options = Field(
        default_factory=dict, description="Options of the backend (see GET /models)."
    )
    normalize: StrictBool = Field(True, description="Scale each embedding to unit length.")
    truncate: StrictBool = Field(
        False, description="Cut texts over the token limit instead of refusing them."
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
    attention: str | None = Field(None, description="Attention backend (extension).")
    attention_options: Options = Field(default_factory=dict, description="Backend options.")


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
        "'2017-10-24 00:00:00'. Or give `start`.",
    )
    start: str | None = Field(
        None,
        description="The first row's timestamp; the others follow at the model's step "
        "(instead of `timestamps`).",
    )
    values: list[list[float]] | None = Field(
        None, description="Rows of the model's channels in original units (oldest first)."
    )
    columns: dict[str, list[float]] | None = Field(
        None,
        description="Instead of `values`: each channel's history by name, oldest first "
        "(columnar: about a fifth of the parsing cost of rows for long histories).",
    )

    def rows(self) -> int:
        """Steps of history given."""
        if self.values is not None:
            return len(self.values)
        return max((len(c) for c in (self.columns or {}).values()), default=0)


class ForecastRequest(_Request):
    model: str = Field(description="Forecaster name, e.g. informer-etth1-h24.")
    series: list[Series] = Field(description="Histories to forecast; each is one batch row.")
    horizon: int | None = Field(None, description="Steps to return (at most the model's horizon).")
    attention: str | None = Field(None, description="Attention backend.")
    attention_options: Options = Field(default_factory=dict, description="Backend options.")


class ForecastOut(BaseModel):
    timestamps: list[str]
    values: list[list[float]]


class ForecastResponse(BaseModel):
    model: str
    attention: str
    horizon: int
    forecasts: list[ForecastOut]


# ----------------------------------------------------------------------------- models, health


class ModelsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]] = Field(description="One card per loaded model.")


class Health(BaseModel):
    status: str
    detail: str = ""
