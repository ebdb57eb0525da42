"""vLLM's ``POST /score`` (also ``/v1/score``), and under the ``/vllm`` prefix its ``/rerank``,
``/v1/rerank``, ``/v2/rerank`` and ``/classify`` (at the bare paths those are shared with other
peers: :mod:`service.http.routes.vllm.shared` tells the bodies apart). Shapes: vLLM's
``vllm/entrypoints/pooling/scoring/protocol.py`` and ``classify/protocol.py``.

A cross-encoder scores each pair (``CrossEncoder.predict``'s activation; ``use_activation``
false: the logit); an embedding model scores a pair by the cosine of the two embeddings, as vLLM
scores with embedding models.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.engine.engine import Answer, Engine
from service.engine.servables.base import TextInput
from service.http.routes.deps import EngineDep, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.tei.surface import cosine
from service.http.routes.vllm.pooling import classify_job, cut_rule, usage, vllm_client
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.vllm import (
    VllmClassificationData,
    VllmClassificationResponse,
    VllmClassifyRequest,
    VllmRequest,
    VllmRerankDocument,
    VllmRerankRequest,
    VllmRerankResponse,
    VllmRerankResult,
    VllmRerankUsage,
    VllmScoreData,
    VllmScoreRequest,
    VllmScoreResponse,
)

router = APIRouter(tags=["vllm"], route_class=FastJSONRoute, responses=ERROR_RESPONSES)


def scores_by_embedding(engine: Engine, name: str | None) -> bool:
    """Whether the model scores pairs by embedding cosine: it is an encoder (named, or the
    only kind loaded when none is named)."""
    if name is not None:
        return engine.text_model(name)[1] == "encode"
    return not engine.registry.names("rerank") and bool(engine.registry.names("encode"))


async def pair_scores(
    engine: Engine,
    body: VllmRequest,
    use_activation: bool | None,
    pairs: list[tuple[str, str]],
    request: Request,
    response: Response,
) -> tuple[Answer, list[float]]:
    """The engine's answer and one score per ``(left, right)`` pair, in order."""
    client = vllm_client(request, body)
    if scores_by_embedding(engine, body.model):
        truncate, cut_start = cut_rule(engine, body, "encode")
        texts = list(dict.fromkeys(t for pair in pairs for t in pair))
        job = TextInput(
            texts,
            body.attention,
            body.attention_options,
            long_text="truncate" if truncate else "error",
            cut_start=cut_start,
            precision=body.precision,
        )
        answer = await engine.encode(body.model, job, client)
        set_timing_headers(response, answer)
        vectors = dict(zip(texts, answer.value, strict=True))
        return answer, [cosine(list(vectors[a]), list(vectors[b])) for a, b in pairs]
    pair_job = classify_job(engine, body, pairs, "rerank", use_activation, what="document")
    answer = await engine.rerank(body.model, pair_job, client)
    set_timing_headers(response, answer)
    return answer, [row[0] for row in answer.value]


@router.post("/vllm/v1/score", response_model=VllmScoreResponse)
@router.post("/vllm/score", response_model=VllmScoreResponse)
@router.post("/v1/score", response_model=VllmScoreResponse)
@router.post("/score", response_model=VllmScoreResponse)
async def score(
    body: VllmScoreRequest, request: Request, response: Response, engine: EngineDep
) -> VllmScoreResponse:
    """vLLM's score: one score per pair (1:N or N:N), in input order."""
    pairs = body.pairs()
    answer, scores = await pair_scores(engine, body, body.use_activation, pairs, request, response)
    return VllmScoreResponse(
        id=body.answer_id("score"),
        model=answer.model,
        data=[VllmScoreData(index=i, score=s) for i, s in enumerate(scores)],
        usage=usage(answer),
    )


@router.post("/vllm/v2/rerank", response_model=VllmRerankResponse)
@router.post("/vllm/v1/rerank", response_model=VllmRerankResponse)
@router.post("/vllm/rerank", response_model=VllmRerankResponse)
async def rerank(
    body: VllmRerankRequest, request: Request, response: Response, engine: EngineDep
) -> VllmRerankResponse:
    """vLLM's rerank: each document scored against the query, best first (ties keep request
    order), the best ``top_n`` (0: all), each with its text."""
    pairs = [(body.query, d) for d in body.documents]
    answer, scores = await pair_scores(engine, body, body.use_activation, pairs, request, response)
    ranked = sorted(enumerate(scores), key=lambda item: -item[1])
    if body.top_n:
        ranked = ranked[: body.top_n]
    return VllmRerankResponse(
        id=body.answer_id("rerank"),
        model=answer.model,
        usage=VllmRerankUsage(prompt_tokens=answer.tokens, total_tokens=answer.tokens),
        results=[
            VllmRerankResult(
                index=i, document=VllmRerankDocument(text=body.documents[i]), relevance_score=s
            )
            for i, s in ranked
        ],
    )


@router.post("/vllm/classify", response_model=VllmClassificationResponse)
async def classify(
    body: VllmClassifyRequest, request: Request, response: Response, engine: EngineDep
) -> VllmClassificationResponse:
    """vLLM's classify: per input, its best label, every label's probability (the model's
    activation; ``use_activation`` false: logits) and the number of labels."""
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    job = classify_job(engine, body, texts, "classify", body.use_activation)
    answer = await engine.classify(body.model, job, vllm_client(request, body))
    set_timing_headers(response, answer)
    labels = engine.labels(answer.model)
    data = []
    for i, row in enumerate(answer.value):
        probs = list(row)
        best = max(range(len(probs)), key=probs.__getitem__)
        label = labels[best] if best < len(labels) else None
        data.append(
            VllmClassificationData(index=i, label=label, probs=probs, num_classes=len(probs))
        )
    return VllmClassificationResponse(
        id=body.answer_id("classify"), model=answer.model, data=data, usage=usage(answer)
    )
