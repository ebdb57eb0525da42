"""``POST /predict`` (text-embeddings-inference's) and ``POST /classify`` (infinity's; also at
``/v1/classify``): label scores per text or text pair from a sequence classifier, best label
first."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.engine.servables.base import ClassifyInput
from service.http.routes.deps import EngineDep, XModel, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.model_names import tei_model
from service.http.routes.tei.truncate import tei_truncate
from service.http.schemas.common import ERROR_RESPONSES, LongTextRule
from service.http.schemas.rerank import (
    ClassifyRequest,
    ClassifyResponse,
    LabelScore,
    PairUsage,
    PredictRequest,
    RerankRequest,
    TeiRerankRequest,
)

router = APIRouter(tags=["classify"], route_class=FastJSONRoute)


ScoredBody = RerankRequest | TeiRerankRequest | PredictRequest | ClassifyRequest


def job_of(
    body: ScoredBody, inputs: list[str | tuple[str, str]], what: str = "input"
) -> ClassifyInput:
    """The engine's job for any rerank / classify body: its inputs and the fields they share
    (a rerank body's ``long_text`` rule; the others cut on ``truncate``)."""
    if isinstance(body, LongTextRule):
        rule = body.long_text_rule
    else:
        rule = "truncate" if body.truncate else "error"
    return ClassifyInput(
        inputs,
        body.attention,
        body.attention_options,
        rule == "truncate",
        body.raw_scores,
        body.max_quality_loss,
        body.precision,
        what=what,
        windows=rule == "windows",
        cut_start=body.truncation_direction == "left",
    )


def labelled(scores: list[float], labels: list[str]) -> list[LabelScore]:
    """One input's scores with their labels, best first (ties keep label order)."""
    ranked = sorted(zip(labels, scores, strict=True), key=lambda item: -item[1])
    return [LabelScore(score=score, label=label) for label, score in ranked]


@router.post(
    "/predict",
    response_model=list[LabelScore] | list[list[LabelScore]],
    responses=ERROR_RESPONSES,
)
async def predict(
    body: PredictRequest,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: XModel = None,
) -> list[LabelScore] | list[list[LabelScore]]:
    """Label scores for one input (a list) or a list of inputs (a list of lists), as
    text-embeddings-inference answers. The model: ``model`` or ``x-model``, else the first
    loaded classifier or reranker."""
    inputs, listed = body.batch
    job = job_of(tei_truncate(body, engine), inputs)
    name = tei_model(engine, body.model, x_model)  # TEI's rules: service.http.routes.model_names
    answer = await engine.classify(name, job, client_of(request), first_if_unnamed=True)
    set_timing_headers(response, answer)
    labels = engine.labels(answer.model)
    out = [labelled(row, labels) for row in answer.value]
    return out if listed else out[0]


@router.post("/v1/classify", response_model=ClassifyResponse, responses=ERROR_RESPONSES)
@router.post("/classify", response_model=ClassifyResponse, responses=ERROR_RESPONSES)
async def classify(
    body: ClassifyRequest, request: Request, response: Response, engine: EngineDep
) -> ClassifyResponse:
    """infinity's classify: per text, every label with its score, best first. The model:
    ``model``; omitted (or infinity's ``default/not-specified``): the only model that
    classifies."""
    job = job_of(body, list(body.input))
    answer = await engine.classify(body.model, job, client_of(request))
    set_timing_headers(response, answer)
    labels = engine.labels(answer.model)
    return ClassifyResponse(
        model=answer.model,
        attention=answer.attention,
        precision=answer.precision,
        data=[labelled(row, labels) for row in answer.value],
        usage=PairUsage(prompt_tokens=answer.tokens, total_tokens=answer.tokens),
    )
