"""``GET /models`` (also at ``/v1/models``, OpenAI's and vLLM's list) and
``GET /models/{name}``: model cards. A served name (``served_model_names``) is listed as vLLM
lists its ``--served-model-name``: an entry of its own, ``id`` the served name and ``root`` the
model it names, after that model's card."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from service.http.routes.deps import EngineDep
from service.http.routes.model_names import served_names
from service.http.schemas.common import ERROR_RESPONSES, ModelsResponse
from service.http.task_routes import routes_of, tasks_of

router = APIRouter(tags=["models"])

# infinity's capability names for the tasks a model answers (its ModelCapabilites).
CAPABILITIES = {"encode": "embed", "rerank": "rerank", "classify": "classify"}
# What with_routes adds to a model's own card for infinity's client.
INFINITY_CARD_FIELDS = ("id", "object", "created", "backend", "capabilities", "stats")


@router.get("/v1/models", response_model=ModelsResponse, responses=ERROR_RESPONSES)
@router.get("/models", response_model=ModelsResponse, responses=ERROR_RESPONSES)
async def list_models(engine: EngineDep) -> ModelsResponse:
    """Cards of every loaded model: limits, channels/frequency or dimension, backends with
    their options and measured quality, and the routes that answer it; after each, an entry
    per served name of it (``id``: that name, ``root``: the model's)."""
    served = served_names(engine)
    data = []
    for card in engine.cards():
        data.append(with_routes(card))
        data += [
            {**data[-1], "id": alias, "root": card["name"]}
            for alias, model in served.items()
            if model == card["name"]
        ]
    return ModelsResponse(data=data)


@router.get("/models/{name}", responses=ERROR_RESPONSES)
async def get_model(name: str, engine: EngineDep) -> dict[str, Any]:
    """The card of one loaded model."""
    return with_routes(engine.card(name))


def with_routes(card: dict[str, Any]) -> dict[str, Any]:
    """``card`` plus ``routes`` (the paths that answer its model, from the task table) and the
    fields infinity's client needs to read a card as its ``ModelInfo`` (``id``, ``object``,
    ``created``, ``backend``, ``capabilities``, ``stats``). ``owned_by`` is left out: that
    client takes only ``"infinity"`` there, and leaving it out is allowed."""
    task = card["task"]
    return {
        "id": card["name"],
        "object": "model",
        "created": int(time.time()),  # as infinity: the time of the answer
        "backend": "torch",
        "capabilities": [CAPABILITIES.get(t, t) for t in tasks_of(task)],
        "stats": {"batch_size": card["limits"]["max_batch_size"]},
        **card,
        # A model whose output only some of its task's routes carry (multi-vector) lists its own.
        "routes": card.get("routes") or routes_of(task),
    }
