"""The bodies of text-embeddings-inference's routes that have no counterpart elsewhere:
``POST /similarity`` (and ``POST /`` on an encoder given ``{"inputs": {"source_sentence", ...}}``),
``POST /embed_all``, ``POST /tokenize``, ``POST /decode`` and ``GET /info``; plus the ``/``
variant of ``/predict``'s body. Field names and defaults are TEI's (``router/src/http/types.rs``,
``router/src/lib.rs``); ``model`` and the ``attention`` / ``precision`` fields are extensions.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictBool, StrictInt

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
from service.http.schemas.rerank import PredictRequest
from service.http.schemas.text import INPUT_TYPE_HELP, InputType

MODEL_HELP = (
    "Which loaded text model answers (extension; also the x-model header): default, the first "
    "loaded text model."
)
PROMPT_HELP = (
    "One of the model's named prompts (GET /models), prepended to every text; default: the "
    "model's default prompt, if it has one."
)


def model_field() -> Any:
    """The ``model`` extension field of the TEI bodies."""
    return Field(None, max_length=512, description=MODEL_HELP)


# ----------------------------------------------------------------------------- similarity


class SimilarityInput(StrictRequest):
    source_sentence: str = Field(description="The text the others are compared with.")
    sentences: list[str] = Field(min_length=1, description="Texts compared with source_sentence.")


class SimilarityParameters(StrictRequest):
    truncate: StrictBool | None = tei_truncate_field()
    truncation_direction: TruncationDirection = truncation_direction_field()
    prompt_name: str | None = Field(None, description=PROMPT_HELP)


class SimilarityRequest(StrictRequest):
    """TEI's ``POST /similarity`` (what huggingface_hub's ``sentence_similarity`` posts to
    ``/``): the cosine of each sentence's embedding with the source sentence's."""

    inputs: SimilarityInput
    parameters: SimilarityParameters | None = Field(None, description="Optional settings.")
    model: str | None = model_field()
    attention: str | None = attention_field(extension=True)
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    precision: str | None = precision_field()
    max_quality_loss: float | None = quality_budget(
        "1 - mean cosine to the exact embedding", "encode"
    )


# ----------------------------------------------------------------------------- predict at /


class RootPredictRequest(PredictRequest):
    """``/predict``'s body as ``POST /`` takes it on a classifier: huggingface_hub's
    ``text_classification`` adds ``parameters`` (``function_to_apply``, ``top_k``), which TEI
    ignores, and so does this server (every label comes back, best first)."""

    parameters: dict[str, Any] | None = Field(
        None, description="Accepted and ignored, as TEI does (huggingface_hub sends it)."
    )


# ----------------------------------------------------------------------------- embed_all


class EmbedAllRequest(StrictRequest):
    """TEI's ``POST /embed_all``: every token's embedding (the last hidden states, no pooling
    and no normalisation), special and prompt tokens included."""

    inputs: str | list[str] = Field(description="A text or a list of texts.")
    truncate: StrictBool | None = tei_truncate_field()
    truncation_direction: TruncationDirection = truncation_direction_field()
    prompt_name: str | None = Field(None, description=PROMPT_HELP)
    input_type: InputType | None = Field(None, description=INPUT_TYPE_HELP + " (extension)")
    model: str | None = model_field()
    attention: str | None = Field(
        None, description="Attention backend (extension; default: the model's)."
    )
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    precision: str | None = precision_field()


# ----------------------------------------------------------------------------- tokenize, decode


class TokenizeRequest(StrictRequest):
    """TEI's ``POST /tokenize``: the tokens of each whole text (no token limit)."""

    inputs: str | list[str] = Field(description="A text or a list of texts.")
    add_special_tokens: StrictBool = Field(True, description="Add [CLS], [SEP] and the like.")
    prompt_name: str | None = Field(None, description=PROMPT_HELP)
    model: str | None = model_field()


class SimpleToken(BaseModel):
    id: int
    text: str = Field(description="The characters it covers (a special token: its name).")
    special: bool
    start: int | None = Field(description="UTF-8 byte offset in the text; null if special.")
    stop: int | None = Field(description="UTF-8 byte offset past its end; null if special.")


TokenId = Annotated[StrictInt, Field(ge=0)]


class DecodeRequest(StrictRequest):
    """TEI's ``POST /decode``: token ids back to text."""

    ids: list[TokenId] | list[list[TokenId]] = Field(
        description="One list of token ids, or a list of them."
    )
    skip_special_tokens: StrictBool = Field(True, description="Leave special tokens out.")
    model: str | None = model_field()


# ----------------------------------------------------------------------------- info


class EmbeddingModel(BaseModel):
    pooling: str = Field(description="cls, mean, last_token, ...; several joined by '+'.")


class Labels(BaseModel):
    id2label: dict[str, str]
    label2id: dict[str, int]


class EmbeddingType(BaseModel):
    embedding: EmbeddingModel


class ClassifierType(BaseModel):
    classifier: Labels


class RerankerType(BaseModel):
    reranker: Labels


class Info(BaseModel):
    """TEI's ``GET /info`` (``router/src/lib.rs``' ``Info``), for one model."""

    model_id: str
    model_sha: str | None = None
    model_dtype: str = Field(description="The default precision: float32, bfloat16, ...")
    served_model_name: str
    model_type: EmbeddingType | ClassifierType | RerankerType
    max_concurrent_requests: int = Field(description="Queued requests before a 429.")
    max_input_length: int = Field(description="The model's token limit.")
    max_batch_tokens: int
    max_batch_requests: int | None = Field(description="Most rows one batch may hold.")
    max_client_batch_size: int = Field(description="Most inputs one request may hold.")
    auto_truncate: bool = Field(
        description="The server's auto_truncate: true, a body without truncate cuts texts over "
        "the limit; false, it refuses them (truncate=true cuts)."
    )
    tokenization_workers: int
    version: str = Field(description="attnserve's version.")
    sha: str | None = None
    docker_label: str | None = None
