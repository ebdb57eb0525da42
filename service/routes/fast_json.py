"""Request bodies parsed by pydantic-core's JSON reader instead of the standard library's.

FastAPI reads a JSON body with ``json.loads``; for a forecast request (hundreds to thousands of
numbers) that builds Python objects on the event loop several times slower than
``pydantic_core.from_json`` (``python -m benchmarks.forecast_parsing`` measures the JSON step). Routers opt in with ``APIRouter(route_class=FastJSONRoute)`` (FastAPI's
documented custom-route hook); validation, OpenAPI and error bodies are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic_core import from_json


class FastJSONRequest(Request):
    """A request whose ``json()`` uses pydantic-core; a body it refuses is re-read with the
    standard library, so malformed JSON raises the same ``JSONDecodeError`` (with its position)
    and anything the standard library accepts (e.g. lone surrogate escapes) still parses."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = from_json(body)
            except ValueError:
                self._json = json.loads(body)
        return self._json


class FastJSONRoute(APIRoute):
    """An ``APIRoute`` that hands its endpoint a :class:`FastJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(FastJSONRequest(request.scope, request.receive))

        return route
