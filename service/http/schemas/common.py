"""What every request and response body shares: strict request parsing, the error body, the
``max_quality_loss`` field, and the bodies of ``GET /models`` and the health probes.

Shape checks live in the bodies; checks that need the model (token limits, context length,
channels, timestamps, backends) happen in the engine before queueing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from models.names import BACKEND_NAMES, DEFAULT_PRECISION
from models.quality_loss import DEFAULT_MAX_QUALITY_LOSS

Options = dict[str, Any]


class StrictRequest(BaseModel):
    """Base of every request body: unknown fields are refused, and so are values of the wrong
    type (a number sent as a string ("24"), a bool as 0/1), not coerced."""

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


def attention_field(extension: bool = False) -> Any:
    """The ``attention`` request field: a backend name or ``auto``. A plain string, checked by
    the engine (its 422 lists the valid names); the names in the description are the backend
    files' own (:data:`models.names.BACKEND_NAMES`), so a new backend appears by itself."""
    what = "Attention backend (extension)" if extension else "Attention backend"
    return Field(
        None,
        description=f"{what}: {', '.join(BACKEND_NAMES)}, or auto: the fastest within "
        "max_quality_loss.",
    )


def precision_field() -> Any:
    """The ``precision`` request field. A plain string, not an enum: the model checks it against
    the precisions it has loaded, and its 422 names those (an enum would name every precision,
    loaded or not)."""
    return Field(
        None,
        max_length=16,
        description="Which loaded copy of the weights runs: float32, bfloat16, int8 or float16, "
        "among those the server loads (GET /models: precisions); default: the first loaded "
        "(float32 unless the operator lists another first). With attention 'auto' and no "
        "precision, auto chooses across the loaded precisions too.",
    )


def precision_out() -> Any:
    """The ``precision`` response field: which precision ran."""
    return Field(DEFAULT_PRECISION, description="The precision that ran (see precision).")


def tei_truncate_field(what: str = "texts over the token limit") -> Any:
    """The ``truncate`` field of text-embeddings-inference's bodies: absent or null means the
    server's ``auto_truncate`` setting, as in TEI (``req.truncate.unwrap_or(info.auto_truncate)``
    in its ``router/src/http/server.rs``)."""
    return Field(
        None,
        description=f"Cut {what} instead of refusing them (a 422): true cuts, false refuses; "
        "default (absent or null): the server's auto_truncate (GET /info; on unless the operator "
        "turns it off, as TEI >= 1.9).",
    )


def long_text_rule(truncate: bool | None, long_text: str | None) -> str:
    """``error``, ``truncate`` or ``windows`` from a body's ``long_text`` and ``truncate``.

    Raises:
        ValueError: ``truncate=true`` beside another ``long_text`` (a 422 naming both).
    """
    if truncate and long_text not in (None, "truncate"):
        raise ValueError(f"truncate=true and long_text={long_text} contradict each other; send one")
    return long_text or ("truncate" if truncate else "error")


class LongTextRule:
    """A body with ``truncate`` and ``long_text`` (``/encode``, the rerank routes): the two are
    refused when they contradict (a 422) and read as one rule. A mixin: each body declares both
    fields itself, with its own help text, where they stand in its schema."""

    if TYPE_CHECKING:
        truncate: bool
        long_text: str | None

    @model_validator(mode="after")
    def _one_long_text_rule(self) -> Self:
        long_text_rule(self.truncate, self.long_text)
        return self

    @property
    def long_text_rule(self) -> str:
        """``error``, ``truncate`` or ``windows``, from ``long_text`` or ``truncate``."""
        return long_text_rule(self.truncate, self.long_text)


# ----------------------------------------------------------------------------- models, health


class ModelsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]] = Field(description="One card per loaded model.")


class Health(BaseModel):
    status: str
    detail: str = ""


INFINITY_DEFAULT_MODEL = "default/not-specified"


def _unspecified(value: Any) -> Any:
    return None if value == INFINITY_DEFAULT_MODEL else value


# A ``model`` field infinity's client fills with its default, "default/not-specified": read as
# no model named (infinity then answers with the one model it serves; here, the one of the task).
ModelName = Annotated[str | None, BeforeValidator(_unspecified)]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


# text-embeddings-inference spells the values "Left" / "Right": either case is taken.
TruncationDirection = Annotated[Literal["right", "left"], BeforeValidator(_lower)]


def truncation_direction_field() -> Any:
    """The ``truncation_direction`` field of the text routes."""
    return Field(
        "right",
        description="Which end of a text over the token limit truncation cuts: right keeps its "
        "first tokens, left keeps its last (the start token and any prompt stay in place). "
        "text-embeddings-inference's field (Left / Right are taken too); only applies when "
        "truncating.",
    )
