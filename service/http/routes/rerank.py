"""``POST /v1/rerank`` (Cohere / Jina / infinity shape) and ``POST /rerank``, which takes
text-embeddings-inference's body (``texts``: TEI's bare list) or infinity's (``documents``:
infinity's answer): documents scored against a query by a cross-encoder, best first."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from service.http.routes.classify import job_of
from service.http.routes.deps import EngineDep, XModel, chosen, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.model_names import tei_model
from service.http.routes.tei.truncate import tei_truncate
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.rerank import (
    InfinityRank,
    InfinityRerankResponse,
    PairUsage,
    RerankBody,
    RerankDocument,
    RerankRequest,
    RerankResponse,
    RerankResult,
    TeiRank,
    TeiRerankRequest,
)

router = APIRouter(tags=["rerank"], route_class=FastJSONRoute, responses=ERROR_RESPONSES)


def best_first(scores: list[list[float]]) -> list[tuple[int, float]]:
    """``(index, score)`` of each document by score, best first (ties keep request order)."""
    return sorted(enumerate(row[0] for row in scores), key=lambda item: -item[1])


@router.post("/v1/rerank", response_model=RerankResponse, response_model_exclude_none=True)
async def rerank(
    body: RerankRequest, request: Request, response: Response, engine: EngineDep
) -> RerankResponse:
    """Score each document against the query with a cross-encoder; results best first."""
    job = job_of(body, [(body.query, d) for d in body.documents], "document")
    answer = await engine.rerank(body.model, job, client_of(request))
    set_timing_headers(response, answer)
    ranked = best_first(answer.value)[: body.top_n]
    results = [
        RerankResult(
            index=i,
            relevance_score=score,
            document=RerankDocument(text=body.documents[i]) if body.return_documents else None,
        )
        for i, score in ranked
    ]
    return RerankResponse(
        model=answer.model,
        attention=answer.attention,
        precision=answer.precision,
        results=results,
        usage=PairUsage(prompt_tokens=answer.tokens, total_tokens=answer.tokens),
    )


@router.post(
    "/rerank",
    response_model=list[TeiRank] | InfinityRerankResponse,
    response_model_exclude_none=True,
)
async def tei_or_infinity_rerank(
    body: RerankBody,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: XModel = None,
) -> list[TeiRank] | InfinityRerankResponse:
    """text-embeddings-inference's rerank (``texts``: ``[{index, score, text?}]``) or infinity's
    (``documents``: ``{object, model, results: [{index, relevance_score, document?}], usage, id,
    created}``), best first. The model: ``model`` or ``x-model``; else TEI's body gets the first
    loaded reranker, infinity's the only one."""
    if isinstance(body, TeiRerankRequest):
        return await tei_rerank(body, request, response, engine, x_model)
    body = body.model_copy(update={"model": chosen(body.model, x_model)})
    answer = await rerank(body, request, response, engine)
    return InfinityRerankResponse(
        model=answer.model,
        attention=answer.attention,
        precision=answer.precision,
        # infinity's document is the text itself, not Cohere's {"text": ...}.
        results=[
            InfinityRank(
                index=r.index,
                relevance_score=r.relevance_score,
                document=r.document.text if r.document else None,
            )
            for r in answer.results
        ],
        usage=answer.usage,
        id=client_of(request).request_id,
        created=int(time.time()),
    )


async def tei_rerank(
    body: TeiRerankRequest,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: str | None = None,
) -> list[TeiRank]:
    """text-embeddings-inference's rerank: ``[{index, score, text?}]`` best first. The model:
    ``model`` or ``x-model``, else the first loaded reranker."""
    job = job_of(tei_truncate(body, engine), [(body.query, t) for t in body.texts], "text")
    name = tei_model(engine, body.model, x_model)  # TEI's rules: service.http.routes.model_names
    answer = await engine.rerank(name, job, client_of(request), first_if_unnamed=True)
    set_timing_headers(response, answer)
    return [
        TeiRank(index=i, score=score, text=body.texts[i] if body.return_text else None)
        for i, score in best_first(answer.value)
    ]
