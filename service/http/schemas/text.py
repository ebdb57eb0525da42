"""The bodies of ``POST /encode`` and the OpenAI-compatible ``POST /v1/embeddings``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, StrictBool, field_validator

from service.http.schemas.common import (
    INFINITY_DEFAULT_MODEL,
    LongTextRule,
    ModelName,
    Options,
    StrictRequest,
    TruncationDirection,
    attention_field,
    precision_field,
    precision_out,
    quality_budget,
    tei_truncate_field,
    truncation_direction_field,
)

# ----------------------------------------------------------------------------- encode


LongText = Literal["error", "truncate", "windows"]
InputType = Literal["query", "document"]
INPUT_TYPE_HELP = (
    "What the texts are: query or document. A multi-vector (ColBERT) model encodes them as "
    "sentence-transformers' encode_query / encode_document do (the side's prompt, token limit, "
    "query expansion and skiplist; default: as encode, without a side); a sentence encoder "
    "prepends its query or document prompt when prompt_name is not given."
)
LONG_TEXT_HELP = (
    "A text over the model's token limit: error (a 422 naming it), truncate (keep its first "
    "tokens), or windows (embed all of it as overlapping windows at the limit, averaged by "
    "their tokens)."
)


DIMENSIONS_HELP = (
    "Shorten each embedding to its first dimensions components (1 to the model's dimension), "
    "then scale it back to unit length if the model's embeddings are unit length, as "
    "sentence-transformers' truncate_dim with normalize_embeddings. Made for models trained for "
    "it (Matryoshka; GET /models: dimensions.matryoshka); default: the whole embedding."
)


class EncodeRequest(LongTextRule, StrictRequest):
    inputs: str | list[str] = Field(
        description="A text or a list of texts.", examples=[["first text", "second text"]]
    )
    model: str | None = Field(None, description="Encoder name; the only loaded encoder if omitted.")
    attention: str | None = attention_field()
    attention_options: Options = Field(
        default_factory=dict, description="Options of the backend (see GET /models)."
    )
    max_quality_loss: float | None = quality_budget(
        "1 - mean cosine to the exact embedding", "encode"
    )
    precision: str | None = precision_field()
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
    truncation_direction: TruncationDirection = truncation_direction_field()
    dimensions: int | None = Field(None, description=DIMENSIONS_HELP)

    prompt_name: str | None = Field(
        None,
        description="One of the model's named prompts (see GET /models), prepended to every "
        "text; default: the model's default prompt, if it has one.",
    )
    input_type: InputType | None = Field(None, description=INPUT_TYPE_HELP)


class TeiEmbedRequest(EncodeRequest):
    """text-embeddings-inference's ``POST /embed``: ``inputs``, ``normalize`` (default true, as
    there), ``truncate``, ``truncation_direction`` and ``prompt_name``; the other fields of
    ``POST /encode`` are extensions."""

    normalize: StrictBool | None = Field(
        True, description="Scale each embedding to unit length (default true, as in TEI)."
    )
    truncate: StrictBool | None = tei_truncate_field()  # type: ignore[assignment]


class Usage(BaseModel):
    tokens: int = Field(description="Tokens the model read, special tokens included.")


class EncodeResponse(BaseModel):
    model: str
    attention: str
    precision: str = precision_out()
    embeddings: list[list[float]] | list[list[list[float]]] = Field(
        description="One vector per text; from a multi-vector (ColBERT) model, one list of "
        "token vectors per text (as infinity answers for ColBERT models)."
    )
    usage: Usage


# ----------------------------------------------------------------------------- OpenAI embeddings


class EmbeddingsRequest(StrictRequest):
    """OpenAI ``POST /v1/embeddings`` (and infinity's ``POST /embeddings``: its ``modality``, its
    ``dimensions: 0`` and its default model name), plus the ``attention`` / ``attention_options``
    extension."""

    input: str | list[str] = Field(description="A text or a list of texts.")
    model: ModelName = Field(
        description="Encoder name, e.g. all-MiniLM-L6-v2; infinity's client's default "
        f"{INFINITY_DEFAULT_MODEL!r} (or null): the only loaded encoder.",
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: little-endian float32 bytes."
    )
    dimensions: int | None = Field(
        None, description=DIMENSIONS_HELP + " 0 (infinity's default) is the whole embedding too."
    )
    user: str | None = Field(None, description="Ignored (OpenAI compatibility).")
    modality: str = Field(
        "text",
        max_length=16,
        description="infinity's field: only text is served (image and audio are a 422).",
    )
    attention: str | None = attention_field(extension=True)
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    max_quality_loss: float | None = quality_budget(
        "1 - mean cosine to the exact embedding", "encode"
    )
    precision: str | None = precision_field()
    prompt_name: str | None = Field(
        None, description="One of the model's named prompts, prepended to every text (extension)."
    )
    long_text: LongText = Field("error", description=LONG_TEXT_HELP + " (extension)")

    @field_validator("dimensions")
    @classmethod
    def _zero_is_whole(cls, value: int | None) -> int | None:
        # infinity's client always sends dimensions, 0 by default: "do not shorten".
        return None if value == 0 else value

    @field_validator("modality")
    @classmethod
    def _text_only(cls, value: str) -> str:
        if value != "text":
            raise ValueError(
                f"only text is served: modality {value!r} (infinity's image and audio "
                "embeddings) has no model here; send modality 'text' or leave it out"
            )
        return value


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
