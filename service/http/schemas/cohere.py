"""The bodies of Cohere's ``POST /v1/embed``, ``POST /v2/embed`` and ``POST /v2/rerank``, as the
``cohere`` package sends and parses them (``cohere.types``, ``cohere.v2.types``), with our
``attention`` / ``precision`` extension fields."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from service.http.schemas.common import (
    Options,
    StrictRequest,
    attention_field,
    precision_field,
    quality_budget,
)
from service.http.schemas.rerank import RerankRequest

EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
InputType = Literal["search_document", "search_query", "classification", "clustering", "image"]
Truncate = Literal["NONE", "START", "END"]

INPUT_TYPE_HELP = (
    "What the texts are for: search_query, search_document, classification or clustering. Each "
    "picks the model's prompt for that kind of text when it has one (search_query: query; "
    "search_document: document, passage or corpus, the first it has; classification and "
    "clustering: a prompt of that name), as sentence-transformers' encode_query / "
    "encode_document pick; otherwise the model's default prompt, if any (GET /models: "
    "task_prompts). image is refused (text models only)."
)
EMBEDDING_TYPES_HELP = (
    "The forms to return: float; int8 / uint8 (scalar quantization on fixed per-dimension "
    "ranges calibrated once per model, GET /models: quantization); binary / ubinary (one bit "
    "per dimension, x > 0, packed eight to a byte; binary is the byte minus 128); base64 "
    "(the float32 little-endian bytes). As sentence-transformers' quantize_embeddings."
)
TRUNCATE_HELP = (
    "A text over the model's token limit: END cuts its end, START its start (the start token "
    "and any prompt stay), NONE answers 422. Default END, as Cohere."
)
PRIORITY_HELP = (
    "Lower is handled first (default 0), as Cohere documents; a request that has waited half "
    "the request timeout goes first whatever its priority."
)


class CohereEmbedRequest(StrictRequest):
    """Cohere ``POST /v1/embed``: texts only (no images)."""

    texts: list[str] = Field(description="The texts to embed.")
    images: list[str] | None = Field(None, description="Refused: attnserve embeds text only.")
    model: str | None = Field(None, description="Encoder name; the only loaded one if omitted.")
    input_type: InputType | None = Field(None, description=INPUT_TYPE_HELP)
    embedding_types: list[EmbeddingType] | None = Field(
        None,
        min_length=1,
        description=EMBEDDING_TYPES_HELP + " v1: omitted, the answer is embeddings_floats; "
        "given, embeddings_by_type.",
    )
    truncate: Truncate = Field("END", description=TRUNCATE_HELP)
    attention: str | None = attention_field(extension=True)
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    max_quality_loss: float | None = quality_budget(
        "1 - mean cosine to the exact embedding", "encode"
    )
    precision: str | None = precision_field()

    @field_validator("images")
    @classmethod
    def _no_images(cls, images: list[str] | None) -> list[str] | None:
        if images:
            raise ValueError("images are not supported: the encoders served here embed text")
        return images

    @field_validator("input_type")
    @classmethod
    def _no_image_input(cls, input_type: str | None) -> str | None:
        if input_type == "image":
            raise ValueError("input_type image is not supported: send texts with another type")
        return input_type


class CohereEmbedV2Request(CohereEmbedRequest):
    """Cohere ``POST /v2/embed``: as v1, plus ``output_dimension`` (our ``dimensions``); the
    answer is always by type (``embedding_types`` default ``["float"]``)."""

    embedding_types: list[EmbeddingType] | None = Field(
        None, min_length=1, description=EMBEDDING_TYPES_HELP + " Default: [float]."
    )
    output_dimension: StrictInt | None = Field(
        None,
        description="Shorten each embedding to its first output_dimension components, then "
        "back to unit length (OpenAI's dimensions; 1 to the model's dimension).",
    )
    max_tokens: StrictInt | None = Field(
        None, description="Refused: texts are cut at the model's token limit (see truncate)."
    )
    priority: StrictInt | None = Field(None, description=PRIORITY_HELP)

    @field_validator("max_tokens")
    @classmethod
    def _no_max_tokens(cls, max_tokens: int | None) -> int | None:
        if max_tokens is not None:
            raise ValueError(
                "max_tokens is not supported: a text is cut at the model's own token limit "
                "(GET /models: max_tokens) as truncate says; drop max_tokens"
            )
        return max_tokens


class CohereRerankV2Request(RerankRequest):
    """Cohere ``POST /v2/rerank``: ``/v1/rerank``'s body, plus ``max_tokens_per_doc`` and
    ``priority``; a pair over the token limit is cut by default, as Cohere cuts long
    documents."""

    long_text: Literal["error", "truncate", "windows"] | None = Field(
        "truncate",
        description="A query-document pair over the model's token limit: truncate (default, "
        "as Cohere), error (a 422), or windows (the document as overlapping windows, scored by "
        "the best).",
    )
    max_tokens_per_doc: StrictInt | None = Field(
        None,
        ge=1,
        description="Accepted; a pair is cut at the model's token limit (query and document "
        "together, longest first), not at this count.",
    )
    priority: StrictInt | None = Field(None, description=PRIORITY_HELP)


# ----------------------------------------------------------------------------- responses


class ApiVersion(BaseModel):
    version: str = Field(description="The Cohere API version the route follows (1 or 2).")


class BilledUnits(BaseModel):
    input_tokens: int = Field(description="Tokens the model read (nothing is billed).")


class Meta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits


class EmbeddingsByType(BaseModel):
    """Cohere's ``embeddings`` object: one list per requested type."""

    model_config = ConfigDict(populate_by_name=True)

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class CohereEmbedFloatsResponse(BaseModel):
    """v1 without ``embedding_types``."""

    response_type: Literal["embeddings_floats"] = "embeddings_floats"
    id: str
    embeddings: list[list[float]]
    texts: list[str]
    meta: Meta


class CohereEmbedByTypeResponse(BaseModel):
    """v1 with ``embedding_types``, and v2."""

    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"
    id: str
    embeddings: EmbeddingsByType
    texts: list[str]
    meta: Meta


class CohereRerankResult(BaseModel):
    index: int = Field(description="Position of the document in the request.")
    relevance_score: float
    document: dict[str, str] | None = Field(None, description="With return_documents: {text}.")


class CohereRerankResponse(BaseModel):
    id: str
    results: list[CohereRerankResult] = Field(description="Best first.")
    meta: Meta
