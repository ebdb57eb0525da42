"""``GET /models`` and ``GET /models/{name}``: model cards."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.http.routes.deps import EngineDep
from service.http.schemas.common import ERROR_RESPONSES, ModelsResponse

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelsResponse, responses=ERROR_RESPONSES)
async def list_models(engine: EngineDep) -> ModelsResponse:
    """Cards of every loaded model: limits, channels/frequency or dimension, backends with
    their options and measured quality."""
    return ModelsResponse(data=engine.cards())


@router.get("/models/{name}", responses=ERROR_RESPONSES)
async def get_model(name: str, engine: EngineDep) -> dict[str, Any]:
    """The card of one loaded model."""
    return engine.card(name)
