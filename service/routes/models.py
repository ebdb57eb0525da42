"""``GET /models`` and ``GET /models/{name}``: model cards."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.errors import ModelNotFound
from service.routes.deps import AUTH, Serving, ServingDep
from service.routes.encode import ERRORS
from service.schemas import ModelsResponse

router = APIRouter(tags=["models"], dependencies=AUTH)


def _card(serving: Serving, name: str) -> dict[str, Any]:
    s = serving.settings
    card = dict(serving.registry.models[name].card())
    card["limits"] = {
        "max_inputs_per_request": s.max_inputs_per_request,
        "max_batch_size": s.max_batch_size,
        "max_batch_tokens": s.max_batch_tokens,
        "max_body_bytes": s.max_body_bytes,
        "request_timeout_s": s.request_timeout_s,
    }
    return card


@router.get("/models", response_model=ModelsResponse, responses=ERRORS)  # type: ignore[arg-type]
async def list_models(serving: ServingDep) -> ModelsResponse:
    """Cards of every loaded model: limits, channels/frequency or dimension, backends with
    their options and measured quality."""
    return ModelsResponse(data=[_card(serving, n) for n in serving.registry.names()])


@router.get("/models/{name}", responses=ERRORS)  # type: ignore[arg-type]
async def get_model(name: str, serving: ServingDep) -> dict[str, Any]:
    """The card of one loaded model."""
    if name not in serving.registry.models:
        raise ModelNotFound(
            f"model {name!r} is not loaded; loaded: {', '.join(serving.registry.names())}"
        )
    return _card(serving, name)
