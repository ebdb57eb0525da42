"""The body and answer of ``POST /embed_sparse`` (text-embeddings-inference's sparse route)."""

from __future__ import annotations

from pydantic import BaseModel, Field, StrictBool

from service.http.schemas.common import (
    Options,
    StrictRequest,
    TruncationDirection,
    attention_field,
    precision_field,
    quality_budget,
    tei_truncate_field,
    truncation_direction_field,
)
from service.http.schemas.text import InputType


class EmbedSparseRequest(StrictRequest):
    """text-embeddings-inference's ``POST /embed_sparse``: ``inputs``, ``truncate``,
    ``truncation_direction`` and ``prompt_name``; ``max_active_dims`` is sentence-transformers'
    (``SparseEncoder.encode``), ``input_type`` as on ``POST /encode`` (``encode_query`` /
    ``encode_document``), the rest this server's extensions."""

    inputs: str | list[str] = Field(
        description="A text or a list of texts.", examples=[["first text", "second text"]]
    )
    model: str | None = Field(
        None, description="Sparse encoder name; the first loaded one if omitted (as TEI)."
    )
    truncate: StrictBool | None = tei_truncate_field()
    truncation_direction: TruncationDirection = truncation_direction_field()
    prompt_name: str | None = Field(
        None,
        description="One of the model's named prompts (GET /models), prepended to every text; "
        "default: the input_type's prompt (below), else the model's default prompt.",
    )
    input_type: InputType | None = Field(
        None,
        description="What the texts are, as on POST /encode and as sentence-transformers' "
        "encode_query (query) and encode_document (document) take them: the prompt of that name "
        "(document: document, passage or corpus) when prompt_name is not given, and, for an "
        "inference-free model, the route (GET /models: sparse.routes; e.g. queries through "
        "fixed per-token weights, documents through the network). Default: as encode, the "
        "model's default route.",
    )
    max_active_dims: int | None = Field(
        None,
        ge=1,
        description="Keep only this many entries per text, those of largest absolute value "
        "(sentence-transformers' max_active_dims); default: the model's own "
        "(GET /models: sparse.max_active_dims), else every non-zero entry.",
    )
    attention: str | None = attention_field(extension=True)
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    max_quality_loss: float | None = quality_budget(
        "1 - Kendall's tau of the dot-product scores, per query, as attnserve evaluate "
        "measures them; no quality.json: exact",
        "sparse",
    )
    precision: str | None = precision_field()


class SparseValue(BaseModel):
    """One non-zero entry of a sparse vector: a vocabulary index and its weight."""

    index: int
    value: float


# Per input, its non-zero entries sorted by index.
SparseAnswer = list[list[SparseValue]]
