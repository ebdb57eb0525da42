"""``POST /encode``: sentence embeddings with a per-request attention backend."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.engine.servables.base import TextInput
from service.http.routes.deps import EngineDep, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.text import EncodeRequest, EncodeResponse, Usage

router = APIRouter(tags=["models"], route_class=FastJSONRoute)


@router.post("/encode", response_model=EncodeResponse, responses=ERROR_RESPONSES)
async def encode(
    body: EncodeRequest, request: Request, response: Response, engine: EngineDep
) -> EncodeResponse:
    """Embed one or more texts with an encoder (its own pooling, prompts and normalisation)."""
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    job = TextInput(
        texts,
        body.attention,
        body.attention_options,
        body.normalize,
        long_text=body.long_text_rule,
        max_quality_loss=body.max_quality_loss,
        prompt_name=body.prompt_name,
        precision=body.precision,
    )
    answer = await engine.encode(body.model, job, client_of(request))
    set_timing_headers(response, answer)
    return EncodeResponse(
        model=answer.model,
        attention=answer.attention,
        precision=answer.precision,
        embeddings=answer.value,
        usage=Usage(tokens=answer.tokens),
    )
