"""``POST /v1/embeddings``: the OpenAI embeddings API over the same encoder and batcher; also at
``/embeddings``, where text-embeddings-inference and infinity serve it."""

from __future__ import annotations

import base64
import sys
from array import array

from fastapi import APIRouter, Request, Response

from service.engine.servables.base import TextInput
from service.http.routes.deps import EngineDep, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.text import (
    EmbeddingItem,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbeddingsUsage,
)

router = APIRouter(tags=["openai"], route_class=FastJSONRoute)


def to_base64(vector: list[float]) -> str:
    """OpenAI's base64 format: the float32 little-endian bytes of the vector."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


@router.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
@router.post("/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
async def embeddings(
    body: EmbeddingsRequest, request: Request, response: Response, engine: EngineDep
) -> EmbeddingsResponse:
    """OpenAI-compatible embeddings, normalised as the model is (a Normalize module in its folder,
    as all-MiniLM-L6-v2 and most sentence-transformers models have: unit length), shortened to
    ``dimensions`` when asked. Also at ``/embeddings``, where text-embeddings-inference and
    infinity serve it; infinity's client's defaults (``model: "default/not-specified"``: the
    only loaded encoder, ``dimensions: 0``: the whole embedding, ``modality: "text"``) are
    taken."""
    texts = [body.input] if isinstance(body.input, str) else body.input
    job = TextInput(
        texts,
        body.attention,
        body.attention_options,
        dimensions=body.dimensions,
        max_quality_loss=body.max_quality_loss,
        prompt_name=body.prompt_name,
        long_text=body.long_text,
        precision=body.precision,
    )
    answer = await engine.encode(body.model, job, client_of(request))
    set_timing_headers(response, answer)
    base64_format = body.encoding_format == "base64"
    data = [
        EmbeddingItem(index=i, embedding=to_base64(v) if base64_format else v)
        for i, v in enumerate(answer.value)
    ]
    usage = EmbeddingsUsage(prompt_tokens=answer.tokens, total_tokens=answer.tokens)
    return EmbeddingsResponse(data=data, model=answer.model, usage=usage)
