"""``POST /encode``: sentence embeddings with a per-request attention backend."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.routes.deps import AUTH, ServingDep
from service.routes.fast_json import FastJSONRoute
from service.routes.text import embed_texts
from service.schemas import EncodeRequest, EncodeResponse, ErrorBody, Usage

router = APIRouter(tags=["models"], dependencies=AUTH, route_class=FastJSONRoute)

ERRORS = {s: {"model": ErrorBody} for s in (401, 404, 413, 422, 429, 503, 504, 507)}


@router.post("/encode", response_model=EncodeResponse, responses=ERRORS)  # type: ignore[arg-type]
async def encode(
    body: EncodeRequest, request: Request, response: Response, serving: ServingDep
) -> EncodeResponse:
    """Embed one or more texts (mean-pooled all-MiniLM-L6-v2, 384-d)."""
    out = await embed_texts(
        request,
        response,
        serving,
        body.model,
        body.inputs,
        body.attention,
        body.attention_options,
        body.normalize,
        body.truncate,
    )
    return EncodeResponse(
        model=out.model,
        attention=out.attention,
        embeddings=out.vectors,
        usage=Usage(tokens=out.tokens),
    )
