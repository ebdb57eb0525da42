"""``POST /embed_sparse``: text-embeddings-inference's sparse embeddings, from a SPLADE model
(or an inference-free one) with a per-request attention backend."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from service.engine.servables.base import TextInput
from service.http.routes.deps import EngineDep, XModel, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.model_names import tei_model
from service.http.routes.tei.text_job import tei_text_job
from service.http.routes.tei.truncate import tei_truncate
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.sparse import EmbedSparseRequest, SparseAnswer

router = APIRouter(tags=["text-embeddings-inference"], route_class=FastJSONRoute)


def sparse_job(body: EmbedSparseRequest) -> TextInput:
    """The engine's input for an ``/embed_sparse`` body."""
    return tei_text_job(
        body,
        "truncate" if body.truncate else "error",
        max_quality_loss=body.max_quality_loss,
        max_active_dims=body.max_active_dims,
    )


@router.post("/embed_sparse", response_model=SparseAnswer, responses=ERROR_RESPONSES)
async def embed_sparse(
    body: EmbedSparseRequest,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: XModel = None,
) -> Any:
    """Per input, its sparse vector's non-zero entries ``{"index", "value"}`` sorted by index,
    as a bare list (which model, backend and precision ran are in the ``x-*`` headers); equal
    to sentence-transformers' ``SparseEncoder.encode`` (``encode_query`` / ``encode_document``
    with ``input_type``). The model: ``model`` or ``x-model``, else the first loaded sparse encoder."""
    name = tei_model(engine, body.model, x_model)  # TEI's rules: service.http.routes.model_names
    job = sparse_job(tei_truncate(body, engine))
    answer = await engine.encode(name, job, client_of(request), True, task="sparse")
    set_timing_headers(response, answer)
    return answer.value
