"""The paths vLLM shares with other peers: ``POST /classify`` (infinity's), ``POST /rerank``
(text-embeddings-inference's and infinity's), ``POST /v1/rerank`` (Cohere / Jina / infinity's)
and ``POST /v2/rerank`` (Cohere's). Registered before the peers' routes, these read the body
and hand it to the peer's handler or to vLLM's.

The rule: a body that names a field of vLLM's body that the peer's body lacks (a *marker*, e.g.
``truncate_prompt_tokens``, ``use_activation``, ``priority`` (not on ``/v2/rerank``, where
Cohere sends it too), ``request_id``, ``user``) is vLLM's and gets vLLM's answer; any other
body is the peer's and is answered exactly as before (TEI's ``texts`` body on ``/rerank`` is
always TEI's; ``top_n: 0``, vLLM's "all", stays the peers' 422 there). A vLLM
client whose body carries no marker gets vLLM's answers at the same paths under ``/vllm``
(``base_url="http://host/vllm"``).

These routes are left out of the OpenAPI schema: the peers' routes, registered after them,
document the paths; vLLM's bodies are documented at their ``/vllm`` paths.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_json

from service.http.routes import classify as peer_classify
from service.http.routes import cohere as peer_cohere
from service.http.routes import rerank as peer_rerank
from service.http.routes.deps import EngineDep, XModel
from service.http.routes.fast_json import FastJSONRoute
from service.http.routes.tei.surface import json_of
from service.http.routes.vllm import score as vllm_score
from service.http.schemas import vllm
from service.http.schemas.cohere import CohereRerankV2Request
from service.http.schemas.rerank import ClassifyRequest, RerankBody, RerankRequest

router = APIRouter(route_class=FastJSONRoute, include_in_schema=False)


def is_vllm(data: Any, peer: type[BaseModel], ours: type[BaseModel]) -> bool:
    """Whether ``data`` names a field of ``ours`` (vLLM's body) that ``peer`` lacks."""
    if not isinstance(data, dict):
        return False
    markers = set(ours.model_fields) - set(peer.model_fields)
    return bool(markers & data.keys())


def parsed(kind: Any, data: Any) -> Any:
    """``data`` validated as ``kind``: a 422 naming each bad field, as FastAPI gives."""
    if data is None:
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        raise RequestValidationError([missing])
    try:
        return TypeAdapter(kind).validate_python(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


def as_json(value: Any, response: Response, exclude_none: bool) -> Response:
    """``value`` as JSON with the headers the handler set on ``response`` (as the route's
    ``response_model`` would render it)."""
    out = Response(to_json(value, exclude_none=exclude_none), media_type="application/json")
    for name, header in response.headers.items():
        if name != "content-length":
            out.headers[name] = header
    return out


async def body_of(request: Request) -> Any:
    """The JSON body (None when empty)."""
    return await json_of(request) if await request.body() else None


@router.post("/classify")
async def classify(request: Request, response: Response, engine: EngineDep) -> Response:
    """infinity's classify, or vLLM's (see the module's rule)."""
    data = await body_of(request)
    if is_vllm(data, ClassifyRequest, vllm.VllmClassifyRequest):
        ours = parsed(vllm.VllmClassifyRequest, data)
        answer = await vllm_score.classify(ours, request, response, engine)
        return as_json(answer, response, exclude_none=False)
    body = parsed(ClassifyRequest, data)
    return as_json(await peer_classify.classify(body, request, response, engine), response, False)


@router.post("/rerank")
async def rerank(
    request: Request, response: Response, engine: EngineDep, x_model: XModel = None
) -> Response:
    """text-embeddings-inference's rerank (``texts``), infinity's or vLLM's (``documents``)."""
    data = await body_of(request)
    tei = isinstance(data, dict) and "texts" in data
    if not tei and is_vllm(data, RerankRequest, vllm.VllmRerankRequest):
        return await _vllm_rerank(data, request, response, engine)
    body = parsed(RerankBody, data)
    answer = await peer_rerank.tei_or_infinity_rerank(body, request, response, engine, x_model)
    return as_json(answer, response, exclude_none=True)


@router.post("/v1/rerank")
async def rerank_v1(request: Request, response: Response, engine: EngineDep) -> Response:
    """Cohere / Jina / infinity's rerank, or vLLM's."""
    return await _rerank(request, response, engine, RerankRequest, peer_rerank.rerank)


@router.post("/v2/rerank")
async def rerank_v2(request: Request, response: Response, engine: EngineDep) -> Response:
    """Cohere's v2 rerank, or vLLM's."""
    return await _rerank(request, response, engine, CohereRerankV2Request, peer_cohere.rerank_v2)


async def _rerank(
    request: Request,
    response: Response,
    engine: Any,
    peer: type[BaseModel],
    peer_answer: Callable[..., Awaitable[Any]],
) -> Response:
    """The body as ``peer``'s, answered by ``peer_answer`` (None fields left out), or as
    vLLM's (see the module's rule)."""
    data = await body_of(request)
    if is_vllm(data, peer, vllm.VllmRerankRequest):
        return await _vllm_rerank(data, request, response, engine)
    body = parsed(peer, data)
    return as_json(await peer_answer(body, request, response, engine), response, True)


async def _vllm_rerank(data: Any, request: Request, response: Response, engine: Any) -> Response:
    answer = await vllm_score.rerank(
        parsed(vllm.VllmRerankRequest, data), request, response, engine
    )
    return as_json(answer, response, exclude_none=False)
