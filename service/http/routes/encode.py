"""``POST /encode``: sentence embeddings with a per-request attention backend; ``POST /embed``:
the same in text-embeddings-inference's shape (a bare list of vectors)."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request, Response

from service.engine.servables.base import TextInput
from service.http.routes.deps import EngineDep, XModel, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.model_names import tei_model
from service.http.routes.tei.text_job import tei_text_job
from service.http.routes.tei.truncate import tei_truncate
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.text import EncodeRequest, EncodeResponse, TeiEmbedRequest, Usage

router = APIRouter(tags=["models"], route_class=FastJSONRoute)


def job_of(body: EncodeRequest) -> TextInput:
    """The engine's input for an ``/encode`` or ``/embed`` body."""
    return tei_text_job(
        body,
        body.long_text_rule,
        normalize=body.normalize,
        max_quality_loss=body.max_quality_loss,
        dimensions=body.dimensions,
    )


@router.post("/encode", response_model=EncodeResponse, responses=ERROR_RESPONSES)
async def encode(
    body: EncodeRequest, request: Request, response: Response, engine: EngineDep
) -> EncodeResponse:
    """Embed one or more texts with an encoder (its own pooling, prompts and normalisation)."""
    # /encode's answer can carry a multi-vector model's token vectors (TEI's /embed cannot).
    job = replace(job_of(body), multi_vector=True)
    answer = await engine.encode(body.model, job, client_of(request))
    set_timing_headers(response, answer)
    return EncodeResponse(
        model=answer.model,
        attention=answer.attention,
        precision=answer.precision,
        embeddings=answer.value,
        usage=Usage(tokens=answer.tokens),
    )


@router.post("/embed", response_model=list[list[float]], responses=ERROR_RESPONSES)
async def tei_embed(
    body: TeiEmbedRequest,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: XModel = None,
) -> list[list[float]]:
    """text-embeddings-inference's embed: one vector per input, as a bare list (which model,
    backend and precision ran are in the ``x-*`` headers). The model: ``model`` or ``x-model``,
    else the first loaded encoder (TEI serves one model: a name no model answers to is ignored);
    no ``truncate``: the ``auto_truncate`` setting."""
    name, body = tei_model(engine, body.model, x_model), tei_truncate(body, engine)
    answer = await engine.encode(name, job_of(body), client_of(request), first_if_unnamed=True)
    set_timing_headers(response, answer)
    vectors: list[list[float]] = answer.value
    return vectors
