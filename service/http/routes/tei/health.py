"""text-embeddings-inference's health checks: ``GET /health``, ``GET /ping`` (SageMaker) and
``GET /`` answer 200 while the server can serve, else 503; open without the API key, as TEI's
public routes are. ``/ping`` and ``/`` answer with an empty body, as TEI's; ``/health`` with
infinity's ``{"unix": <time>}`` (infinity's client parses it; TEI's clients read the status
only). Included in tei.py's router.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Response
from pydantic_core import to_json

from service.http.routes.deps import AppStateDep
from service.http.routes.health import readyz
from service.http.schemas.common import ErrorBody

router = APIRouter()

HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The server can serve (an empty body, as TEI's)."},
    503: {"model": ErrorBody, "description": "Loading, draining or failed."},
}
UNIX_HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    **HEALTH_RESPONSES,
    200: {
        "description": "The server can serve: infinity's body, the server's Unix time (TEI's "
        "clients read the status only).",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"unix": {"type": "number"}},
                    "required": ["unix"],
                }
            }
        },
    },
}


async def can_serve(state: AppStateDep) -> Response:
    """200 with an empty body while ready (loaded, warmed up, not draining); otherwise
    ``/readyz``'s 503."""
    ready = await readyz(state)
    return Response(status_code=200) if ready.status_code == 200 else ready


async def can_serve_unix(state: AppStateDep) -> Response:
    """As :func:`can_serve`, with infinity's body ``{"unix": <time>}`` when ready."""
    ready = await can_serve(state)
    if ready.status_code != 200:
        return ready
    return Response(to_json({"unix": time.time()}), media_type="application/json")


for path, summary, answer, responses in (
    ("/health", "TEI's and infinity's health check", can_serve_unix, UNIX_HEALTH_RESPONSES),
    ("/ping", "SageMaker's health check", can_serve, HEALTH_RESPONSES),
    ("/", "TEI's health check at the root (the Inference API's)", can_serve, HEALTH_RESPONSES),
):
    router.add_api_route(
        path,
        answer,
        methods=["GET"],
        summary=summary,
        response_class=Response,
        responses=responses,
        tags=["operations"],
        name=f"tei_health_{path.strip('/') or 'root'}",
    )
