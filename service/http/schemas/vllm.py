"""The bodies of vLLM's pooling API (``POST /pooling``, ``/score``, ``/rerank``, ``/classify``
and vLLM's ``/v1/embeddings`` extras), with the field names, defaults and answer shapes of
vLLM's ``vllm/entrypoints/pooling/*/protocol.py`` and ``docs/serving/openai_compatible_server.md``.

Every field vLLM's body has is declared, so nothing vLLM sends is silently dropped: a field we
serve is honoured (``truncate_prompt_tokens``, ``truncation_side``, ``use_activation``,
``dimensions``, ``encoding_format``, ``endianness``, ``priority``); a field we cannot serve is a
422 naming it (:data:`REFUSED`); and the fields vLLM itself documents as hints, which change no
number in the answer, are accepted and ignored:

- ``user`` (OpenAI's end-user id, for abuse monitoring),
- ``request_id`` (echoed as the answer's ``id``),
- ``cache_salt`` (salts vLLM's prefix cache; there is none here),
- ``padding: "do_not_pad"``, ``add_special_tokens: true``, ``embed_dtype: "float32"``,
  ``mm_processor_kwargs: null`` / ``{}`` (their defaults, which is what runs here).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, StrictBool, StrictInt, model_validator

from service.http.schemas.common import (
    Options,
    StrictRequest,
    attention_field,
    precision_field,
)

# Field -> (the values served, why others are refused). A body naming a field with another
# value gets a 422 naming the field (checked on the raw body, before any other check).
REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "padding": (
        (None, "do_not_pad"),
        "inputs run unpadded here; send 'do_not_pad' or leave it out",
    ),
    "add_special_tokens": ((True,), "the model's special tokens are always added"),
    "embed_dtype": ((None, "float32"), "embeddings are float32; send 'float32' or leave it out"),
    "mm_processor_kwargs": ((None, {}), "only text is served (no multimodal processor)"),
    "encoding_format": (
        (None, "float", "base64"),
        "send 'float' or 'base64' (the bytes formats are not served)",
    ),
    "messages": ((), "chat messages are not served: send the texts as input"),
    "chat_template": ((), "chat templates are not served: send the texts as input"),
    "chat_template_kwargs": ((), "chat templates are not served: send the texts as input"),
    "add_generation_prompt": ((), "chat templates are not served: send the texts as input"),
    "continue_final_message": ((), "chat templates are not served: send the texts as input"),
    "media_io_kwargs": ((), "only text is served"),
    "data": ((), "IO processor plugins are not served"),
}
POOLING_TASKS = ("embed", "token_embed", "classify")
HINT_HELP = "Accepted and ignored (a hint in vLLM too)."


def refuse_unserved(data: Any) -> Any:
    """422 (a ValueError naming the field) for a field of :data:`REFUSED` with a value not
    served, and for token ids sent as input."""
    if not isinstance(data, dict):
        return data
    for name, (served, why) in REFUSED.items():
        if name in data and data[name] not in served:
            raise ValueError(f"{name}={data[name]!r} is not supported: {why}")
    for name in ("input", "text_1", "text_2", "queries", "documents", "items", "data_1", "data_2"):
        if _has_token_ids(data.get(name)):
            raise ValueError(f"{name}: token ids are not supported: send the texts")
    return data


def _has_token_ids(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, list) and any(_has_token_ids(v) for v in value)


class VllmRequest(StrictRequest):
    """``PoolingBasicRequestMixin``: the fields every vLLM pooling body has, plus our
    ``attention`` / ``attention_options`` / ``precision`` extensions."""

    model: str | None = Field(None, description="Model name; omitted: the only one of the task.")
    user: str | None = Field(None, description=HINT_HELP)
    truncate_prompt_tokens: StrictInt | None = Field(
        None,
        ge=-1,
        description="-1 (or the model's token limit): cut an input over the model's limit "
        "instead of a 422; a smaller count is refused (inputs are cut at the model's limit "
        "only). Default: a 422 for an input over the limit, as vLLM.",
    )
    truncation_side: Literal["left", "right"] | None = Field(
        None, description="right (default) keeps the first tokens, left the last."
    )
    request_id: str | None = Field(None, description="Echoed as the answer's id.")
    priority: StrictInt = Field(
        0,
        ge=-(2**63),
        le=2**63 - 1,
        description="Lower is served first (default 0); a request that has waited half the "
        "request timeout goes first whatever its priority, so none starves.",
    )
    cache_salt: str | None = Field(None, min_length=1, max_length=1024, description=HINT_HELP)
    padding: Literal["max_length", "do_not_pad"] | None = Field(
        None, description="do_not_pad only (what runs)."
    )
    mm_processor_kwargs: dict[str, Any] | None = Field(None, description="null or {} only.")
    attention: str | None = attention_field(extension=True)
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    precision: str | None = precision_field()

    @model_validator(mode="before")
    @classmethod
    def _served_only(cls, data: Any) -> Any:
        return refuse_unserved(data)

    def answer_id(self, prefix: str) -> str:
        """The answer's ``id``: the request's ``request_id``, else vLLM's ``<prefix>-<uuid>``."""
        return self.request_id or f"{prefix}-{uuid.uuid4().hex}"


class VllmActivation(BaseModel):
    use_activation: StrictBool | None = Field(
        None,
        description="Embeddings: scale to unit length; scores: the model's activation "
        "(sigmoid / softmax). false: raw vectors / logits. Default: as the model does.",
    )


class VllmPoolingRequest(VllmRequest, VllmActivation):
    """vLLM's ``POST /pooling`` (``PoolingCompletionRequest``)."""

    input: str | list[str] = Field(description="A text or a list of texts.")
    task: str | None = Field(
        None,
        description="embed, token_embed or classify; default: embed for an encoder, classify "
        "for a classifier or reranker.",
    )
    dimensions: StrictInt | None = Field(None, ge=1, description="embed: keep the first ones.")
    encoding_format: Literal["float", "base64"] = Field("float")
    embed_dtype: Literal["float32"] = Field("float32", description="float32 only.")
    endianness: Literal["native", "big", "little"] = Field(
        "native", description="Byte order of base64 floats (native: this server's)."
    )
    add_special_tokens: StrictBool = Field(True, description="true only.")

    @model_validator(mode="after")
    def _known_task(self) -> VllmPoolingRequest:
        if self.task is not None and self.task not in POOLING_TASKS:
            raise ValueError(
                f"task {self.task!r} is not served by /pooling here; send one of "
                f"{', '.join(POOLING_TASKS)}"
            )
        return self


class VllmEmbeddingRequest(VllmPoolingRequest):
    """vLLM's ``POST /v1/embeddings`` (OpenAI's body plus vLLM's extra fields)."""

    model: str | None = Field(None, description="Encoder name.")
    task: None = Field(None, description="Not a field of this route.", exclude=True)


class VllmClassifyRequest(VllmRequest, VllmActivation):
    """vLLM's ``POST /classify`` (``ClassificationCompletionRequest``)."""

    input: str | list[str] = Field(description="A text or a list of texts.")
    add_special_tokens: StrictBool = Field(True, description="true only.")


# vLLM's score body names its two sides one of four ways.
SCORE_SIDES = (
    ("text_1", "text_2"),
    ("queries", "documents"),
    ("data_1", "data_2"),
    ("queries", "items"),
)


class VllmScoreRequest(VllmRequest, VllmActivation):
    """vLLM's ``POST /score``: ``text_1`` / ``text_2`` (or ``queries`` / ``documents``,
    ``data_1`` / ``data_2``, ``queries`` / ``items``). One text on the left scores against
    every text on the right (1:N); equal lists score pairwise (N:N)."""

    text_1: str | list[str] | None = None
    text_2: str | list[str] | None = None
    queries: str | list[str] | None = None
    documents: str | list[str] | None = None
    data_1: str | list[str] | None = None
    data_2: str | list[str] | None = None
    items: str | list[str] | None = None

    @model_validator(mode="after")
    def _two_sides(self) -> VllmScoreRequest:
        self.pairs()
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """The (left, right) pairs to score, in order.

        Raises:
            ValueError: not one of the four spellings, or lengths neither 1:N nor N:N.
        """
        given = [
            (a, b)
            for a, b in SCORE_SIDES
            if getattr(self, a) is not None and getattr(self, b) is not None
        ]
        named = {n for n in self.model_fields_set if n in {s for p in SCORE_SIDES for s in p}}
        if len(given) != 1 or named != set(given[0]):
            raise ValueError(
                "send the two sides as one of text_1/text_2, queries/documents, data_1/data_2 "
                "or queries/items"
            )
        a, b = given[0]
        left, right = _listed(getattr(self, a)), _listed(getattr(self, b))
        if not left or not right:
            raise ValueError(f"{a} and {b} must each hold at least one text")
        if len(left) == 1:
            left = left * len(right)
        if len(left) != len(right):
            raise ValueError(
                f"{a} has {len(left)} texts and {b} {len(right)}: send one text in {a} "
                f"(1:N) or as many as in {b} (N:N)"
            )
        return list(zip(left, right, strict=True))


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


class VllmRerankRequest(VllmRequest, VllmActivation):
    """vLLM's ``POST /rerank`` (also ``/v1/rerank``, ``/v2/rerank``)."""

    query: str = Field(description="The query.")
    documents: list[str] = Field(description="Texts to score against the query.")
    top_n: StrictInt = Field(0, ge=0, description="Best top_n results; 0 (default): all.")


# ----------------------------------------------------------------------------- answers


def _now() -> int:
    return int(time.time())


class VllmListResponse(BaseModel):
    """What vLLM's list answers share; each adds its ``data`` and ``usage`` (in that order,
    after these, as vLLM's own answers have them)."""

    id: str
    object: str = "list"
    created: int = Field(default_factory=_now)
    model: str


class VllmUsageInfo(BaseModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0
    prompt_tokens_details: None = None


class VllmPoolingData(BaseModel):
    index: int
    object: str = "pooling"
    data: list[list[float]] | list[float] | str


class VllmPoolingResponse(VllmListResponse):
    data: list[VllmPoolingData]
    usage: VllmUsageInfo


class VllmEmbeddingData(BaseModel):
    index: int
    object: str = "embedding"
    embedding: list[float] | str


class VllmEmbeddingResponse(VllmListResponse):
    data: list[VllmEmbeddingData]
    usage: VllmUsageInfo


class VllmClassificationData(BaseModel):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


class VllmClassificationResponse(VllmListResponse):
    data: list[VllmClassificationData]
    usage: VllmUsageInfo


class VllmScoreData(BaseModel):
    index: int
    object: str = "score"
    score: float


class VllmScoreResponse(VllmListResponse):
    data: list[VllmScoreData]
    usage: VllmUsageInfo


class VllmRerankDocument(BaseModel):
    text: str


class VllmRerankResult(BaseModel):
    index: int
    document: VllmRerankDocument
    relevance_score: float


class VllmRerankUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class VllmRerankResponse(BaseModel):
    id: str
    model: str
    usage: VllmRerankUsage
    results: list[VllmRerankResult] = Field(description="Best first.")
