"""Cohere's API: ``POST /v1/embed``, ``POST /v2/embed`` and ``POST /v2/rerank`` (v1 rerank is
``/v1/rerank``, :mod:`service.http.routes.rerank`), answered as ``cohere.Client`` and
``cohere.ClientV2`` parse them. Each is the engine call of its OpenAI / rerank counterpart;
quantized embedding types come from the model (:mod:`models.text.quantize`), rendered here."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response

from service.engine.engine import Engine
from service.engine.servables.base import TextInput
from service.http.routes.classify import job_of
from service.http.routes.deps import EngineDep, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.rerank import best_first
from service.http.schemas.cohere import (
    ApiVersion,
    BilledUnits,
    CohereEmbedByTypeResponse,
    CohereEmbedFloatsResponse,
    CohereEmbedRequest,
    CohereEmbedV2Request,
    CohereRerankResponse,
    CohereRerankResult,
    CohereRerankV2Request,
    EmbeddingsByType,
    Meta,
)
from service.http.schemas.common import ERROR_RESPONSES

router = APIRouter(tags=["cohere"], route_class=FastJSONRoute, responses=ERROR_RESPONSES)

# Cohere's input_type -> the task whose prompt the model picks (TextInput.task).
TASKS = {
    "search_query": "query",
    "search_document": "document",
    "classification": "classification",
    "clustering": "clustering",
}
# Cohere's truncate -> (our long-text rule, cut the start).
TRUNCATION = {"NONE": ("error", False), "END": ("truncate", False), "START": ("truncate", True)}
# Embedding types rendered from the floats here; the others (quantized, and base64 of the
# float32 bytes) the engine makes from the embeddings' tensor.
FROM_FLOATS = ("float",)


def embed_job(body: CohereEmbedRequest, types: list[str], dimensions: int | None) -> TextInput:
    """The engine's input for a Cohere embed body asking for ``types``."""
    long_text, cut_start = TRUNCATION[body.truncate]
    return TextInput(
        body.texts,
        body.attention,
        body.attention_options,
        long_text=long_text,
        cut_start=cut_start,
        dimensions=dimensions,
        max_quality_loss=body.max_quality_loss,
        precision=body.precision,
        quantize=tuple(t for t in types if t not in FROM_FLOATS),
        task=TASKS.get(body.input_type) if body.input_type else None,
    )


def by_type(value: Any, types: list[str]) -> EmbeddingsByType:
    """The engine's answer (float rows, or ``{form: rows}`` with quantized forms) as Cohere's
    ``embeddings`` object holding ``types``."""
    floats = value["float"] if isinstance(value, dict) else value
    out: dict[str, Any] = {}
    for form in types:
        if form == "float":
            out["float"] = floats
        else:
            out[form] = value[form]
    return EmbeddingsByType.model_validate(out)


def meta(version: str, tokens: int) -> Meta:
    """Cohere's ``meta``: the API version and the tokens read (reported as billed units)."""
    return Meta(
        api_version=ApiVersion(version=version), billed_units=BilledUnits(input_tokens=tokens)
    )


def response_id(request_id: str) -> str:
    """The request's id (its ``x-request-id``), or a new one."""
    return request_id or uuid.uuid4().hex


async def embedded_by_type(
    body: CohereEmbedRequest,
    dimensions: int | None,
    version: str,
    request: Request,
    response: Response,
    engine: Engine,
    priority: int = 0,
) -> CohereEmbedByTypeResponse:
    """The ``embeddings_by_type`` answer of either API version (types default to float;
    ``priority``: v2's, lower is handled first)."""
    types = list(dict.fromkeys(body.embedding_types or ["float"]))
    client = replace(client_of(request), priority=priority)
    answer = await engine.encode(body.model, embed_job(body, types, dimensions), client)
    set_timing_headers(response, answer)
    return CohereEmbedByTypeResponse(
        id=response_id(client.request_id),
        embeddings=by_type(answer.value, types),
        texts=body.texts,
        meta=meta(version, answer.tokens),
    )


@router.post(
    "/v1/embed",
    response_model=CohereEmbedFloatsResponse | CohereEmbedByTypeResponse,
    response_model_exclude_none=True,
)
async def embed_v1(
    body: CohereEmbedRequest, request: Request, response: Response, engine: EngineDep
) -> CohereEmbedFloatsResponse | CohereEmbedByTypeResponse:
    """Cohere v1 embed: ``embeddings_floats`` without ``embedding_types``, else
    ``embeddings_by_type``."""
    if body.embedding_types is not None:
        return await embedded_by_type(body, None, "1", request, response, engine)
    client = client_of(request)
    answer = await engine.encode(body.model, embed_job(body, ["float"], None), client)
    set_timing_headers(response, answer)
    return CohereEmbedFloatsResponse(
        id=response_id(client.request_id),
        embeddings=answer.value,
        texts=body.texts,
        meta=meta("1", answer.tokens),
    )


@router.post(
    "/v2/embed", response_model=CohereEmbedByTypeResponse, response_model_exclude_none=True
)
async def embed_v2(
    body: CohereEmbedV2Request, request: Request, response: Response, engine: EngineDep
) -> CohereEmbedByTypeResponse:
    """Cohere v2 embed: embeddings by type (default float), ``output_dimension`` shortening."""
    dimensions, priority = body.output_dimension, body.priority or 0
    return await embedded_by_type(body, dimensions, "2", request, response, engine, priority)


@router.post("/v2/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True)
async def rerank_v2(
    body: CohereRerankV2Request, request: Request, response: Response, engine: EngineDep
) -> CohereRerankResponse:
    """Cohere v2 rerank: ``/v1/rerank``'s scores (the model's activation), best first, in
    Cohere's v2 shape."""
    client = replace(client_of(request), priority=body.priority or 0)
    job = job_of(body, [(body.query, d) for d in body.documents], "document")
    answer = await engine.rerank(body.model, job, client)
    set_timing_headers(response, answer)
    results = [
        CohereRerankResult(
            index=i,
            relevance_score=score,
            document={"text": body.documents[i]} if body.return_documents else None,
        )
        for i, score in best_first(answer.value)[: body.top_n]
    ]
    return CohereRerankResponse(
        id=response_id(client.request_id), results=results, meta=meta("2", answer.tokens)
    )
