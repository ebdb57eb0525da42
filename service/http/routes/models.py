"""``GET /models`` and ``GET /models/{name}``: model cards."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.http.routes.deps import EngineDep
from service.http.schemas.common import ERROR_RESPONSES, ModelsResponse
from service.http.task_routes import routes_of

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelsResponse, responses=ERROR_RESPONSES)
async def list_models(engine: EngineDep) -> ModelsResponse:
    """Cards of every loaded model: limits, channels/frequency or dimension, backends with
    their options and measured quality, and the routes that answer it."""
    return ModelsResponse(data=[with_routes(card) for card in engine.cards()])


@router.get("/models/{name}", responses=ERROR_RESPONSES)
async def get_model(name: str, engine: EngineDep) -> dict[str, Any]:
    """The card of one loaded model."""
    return with_routes(engine.card(name))


def with_routes(card: dict[str, Any]) -> dict[str, Any]:
    """``card`` plus ``routes``: the paths that answer its model (from the task table)."""
    return {**card, "routes": routes_of(card["task"])}
