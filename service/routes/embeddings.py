"""``POST /v1/embeddings``: the OpenAI embeddings API over the same encoder and batcher."""

from __future__ import annotations

import base64
import sys
from array import array

from fastapi import APIRouter, Request, Response

from service.errors import InvalidRequest
from service.routes.deps import AUTH, ServingDep
from service.routes.encode import ERRORS
from service.routes.fast_json import FastJSONRoute
from service.routes.text import embed_texts
from service.schemas import EmbeddingItem, EmbeddingsRequest, EmbeddingsResponse, EmbeddingsUsage

router = APIRouter(tags=["openai"], dependencies=AUTH, route_class=FastJSONRoute)


def to_base64(vector: list[float]) -> str:
    """OpenAI's base64 format: the float32 little-endian bytes of the vector."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


@router.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERRORS)  # type: ignore[arg-type]
async def embeddings(
    body: EmbeddingsRequest, request: Request, response: Response, serving: ServingDep
) -> EmbeddingsResponse:
    """OpenAI-compatible embeddings (unit-normalised, as OpenAI's are)."""
    if body.dimensions is not None:
        servable = serving.registry.get(body.model, "encode")
        dim = getattr(servable, "dim", None)
        if body.dimensions != dim:
            raise InvalidRequest(f"dimensions must be {dim} for {servable.name} (no shortening)")
    out = await embed_texts(
        request, response, serving, body.model, body.input, body.attention, body.attention_options
    )
    data = [
        EmbeddingItem(index=i, embedding=to_base64(v) if body.encoding_format == "base64" else v)
        for i, v in enumerate(out.vectors)
    ]
    usage = EmbeddingsUsage(prompt_tokens=out.tokens, total_tokens=out.tokens)
    return EmbeddingsResponse(data=data, model=out.model, usage=usage)
