"""The bodies of the rerank and classify routes: Cohere/Jina/infinity's ``POST /v1/rerank``,
text-embeddings-inference's ``POST /rerank`` and ``POST /predict``, infinity's ``POST /rerank``
(its body, told from TEI's by ``documents``) and ``POST /classify`` (also at ``/v1/classify``);
each with our ``attention`` / ``precision`` extension fields."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

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

RERANK_METRIC = "1 - Kendall's tau between the scores and exact attention's"
CLASSIFY_METRIC = "share of inputs whose top label differs from exact attention's"
TRUNCATE_HELP = (
    "Cut an input over the model's token limit (query and document together, special tokens "
    "included) as the model's tokenizer does for pairs, longest text first, instead of a 422."
)


class Extensions(StrictRequest):
    """Fields beyond the peers' APIs, the same on every rerank / classify route."""

    attention: str | None = attention_field()
    attention_options: Options = Field(default_factory=dict, description="Backend options.")
    precision: str | None = precision_field()
    truncate: StrictBool = Field(False, description=TRUNCATE_HELP)
    truncation_direction: TruncationDirection = truncation_direction_field()


class LongDocuments(LongTextRule, Extensions):
    """The long-text rule of the rerank routes, as ``/encode``'s ``long_text``."""

    long_text: Literal["error", "truncate", "windows"] | None = Field(
        None,
        description="A query-document pair over the model's token limit: error (a 422 naming "
        "it), truncate (as truncate=true), or windows (the document as overlapping windows, "
        "each with the whole query; it scores as its best window). Default: truncate when "
        "truncate=true, else error.",
    )


# ----------------------------------------------------------------------------- Cohere-style rerank


class RerankRequest(LongDocuments):
    """Cohere / Jina / infinity ``POST /v1/rerank``; infinity's ``POST /rerank``."""

    model: ModelName = Field(
        None,
        description="Reranker name; omitted or infinity's "
        f"{INFINITY_DEFAULT_MODEL!r}: the only loaded reranker.",
    )
    query: str = Field(min_length=1, description="The search query.")
    documents: list[str] = Field(description="Texts to score against the query.")
    top_n: StrictInt | None = Field(
        None, ge=1, description="Return only the best top_n results (default: all)."
    )
    return_documents: StrictBool = Field(
        False, description="Include each document's text in its result."
    )
    raw_scores: StrictBool = Field(
        False,
        description="relevance_score as the model's raw logit instead of its activation "
        "(extension; default: as sentence-transformers' CrossEncoder.predict, e.g. sigmoid).",
    )
    max_quality_loss: float | None = quality_budget(RERANK_METRIC, "rerank")


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int = Field(description="Position of the document in the request.")
    relevance_score: float
    document: RerankDocument | None = None


class InfinityRank(BaseModel):
    index: int = Field(description="Position of the document in the request.")
    relevance_score: float
    document: str | None = Field(None, description="The document (with return_documents).")


class PairUsage(BaseModel):
    prompt_tokens: int = Field(description="Tokens the model read over all inputs.")
    total_tokens: int


class RerankResponse(BaseModel):
    object: Literal["rerank"] = "rerank"
    model: str
    attention: str
    precision: str = precision_out()
    results: list[RerankResult] = Field(description="Sorted by relevance_score, best first.")
    usage: PairUsage


class InfinityRerankResponse(RerankResponse):
    """infinity's rerank answer (``POST /rerank`` with ``documents``): ``/v1/rerank``'s, with
    each document as its text (not Cohere's ``{"text": ...}``), an ``id`` and a ``created``."""

    results: list[InfinityRank] = Field(  # type: ignore[assignment]
        description="Sorted by relevance_score, best first."
    )
    id: str = Field(description="The request id (x-request-id).")
    created: int = Field(description="Unix time of the answer.")


# ----------------------------------------------------------------------------- TEI rerank


class TeiRerankRequest(LongDocuments):
    """text-embeddings-inference's ``POST /rerank``."""

    model: str | None = Field(None, description="Reranker name (extension).")
    truncate: StrictBool | None = tei_truncate_field(  # type: ignore[assignment]
        "a pair over the limit"
    )
    query: str = Field(min_length=1)
    texts: list[str] = Field(description="Texts to score against the query.")
    raw_scores: StrictBool = Field(False, description="Raw logits instead of the activation.")
    return_text: StrictBool = Field(False, description="Include each text in its result.")
    max_quality_loss: float | None = quality_budget(RERANK_METRIC, "rerank")


class TeiRank(BaseModel):
    index: int
    score: float
    text: str | None = None


# ----------------------------------------------------------------------------- POST /rerank


def _rerank_shape(data: Any) -> str:
    """infinity's body names ``documents``; anything else is read as TEI's (``texts``), whose
    route ``/rerank`` was first."""
    return "infinity" if isinstance(data, dict) and "documents" in data else "tei"


def _untagged(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate, reporting each error at its field (``body.top_n``) rather than under the
    union's tag (``body.infinity.top_n``), so TEI's errors read as they did."""
    try:
        return handler(value)
    except ValidationError as exc:
        details: list[InitErrorDetails] = [
            {
                "type": PydanticCustomError(error["type"], error["msg"]),
                "loc": error["loc"][1:],
                "input": error["input"],
            }
            for error in exc.errors(include_url=False)
        ]
        raise ValidationError.from_exception_data(exc.title, details) from None


# ``POST /rerank``: text-embeddings-inference's body or infinity's, told apart by ``documents``.
RerankBody = Annotated[
    Annotated[TeiRerankRequest, Tag("tei")] | Annotated[RerankRequest, Tag("infinity")],
    Discriminator(_rerank_shape),
    WrapValidator(_untagged),
]


# ----------------------------------------------------------------------------- classify

# A pair is a JSON array of two strings (a list: strict parsing takes no array as a tuple).
Pair = Annotated[list[str], Field(min_length=2, max_length=2)]
TextOrPair = str | Pair


class PredictRequest(Extensions):
    """text-embeddings-inference's ``POST /predict``: one text, one pair ``[a, b]``, or a list
    of texts and pairs. As in TEI, a list of exactly two strings is one pair."""

    model: str | None = Field(None, description="Classifier name (extension).")
    truncate: StrictBool | None = tei_truncate_field(  # type: ignore[assignment]
        "inputs over the limit"
    )
    inputs: TextOrPair | list[TextOrPair] = Field(
        description="A text, a pair [text, text], or a list of them.",
        examples=["I like you.", ["a question", "a candidate answer"]],
    )
    raw_scores: StrictBool = Field(False, description="Raw logits instead of the activation.")
    max_quality_loss: float | None = quality_budget(CLASSIFY_METRIC, "classify")

    @property
    def batch(self) -> tuple[list[str | tuple[str, str]], bool]:
        """The inputs as a list, and whether the request sent a list of inputs (the answer is
        then a list of lists)."""
        given = self.inputs
        if isinstance(given, str):
            return [given], False
        if len(given) == 2 and isinstance(given[0], str) and isinstance(given[1], str):
            return [(given[0], given[1])], False
        return [_one(item) for item in given], True


def _one(item: str | list[str]) -> str | tuple[str, str]:
    """A text, or a two-string list as a pair."""
    return item if isinstance(item, str) else (item[0], item[1])


class LabelScore(BaseModel):
    score: float
    label: str


class ClassifyRequest(Extensions):
    """infinity's ``POST /classify`` (served there and at ``/v1/classify``)."""

    model: ModelName = Field(
        None,
        description="Classifier name; omitted or infinity's "
        f"{INFINITY_DEFAULT_MODEL!r}: the only loaded model that classifies (a reranker "
        "classifies too).",
    )
    input: list[str] = Field(description="Texts to classify.")
    raw_scores: StrictBool = Field(False, description="Raw logits instead of the activation.")
    max_quality_loss: float | None = quality_budget(CLASSIFY_METRIC, "classify")


class ClassifyResponse(BaseModel):
    object: Literal["classify"] = "classify"
    model: str
    attention: str
    precision: str = precision_out()
    data: list[list[LabelScore]] = Field(description="Per input, labels by score, best first.")
    usage: PairUsage
