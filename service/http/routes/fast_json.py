"""Request bodies parsed by pydantic-core's JSON reader instead of the standard library's.

FastAPI reads a JSON body with ``json.loads``; for a forecast request (hundreds to thousands of
numbers) that builds Python objects on the event loop several times slower than
``pydantic_core.from_json`` (``python -m benchmarks.forecast.parsing`` measures the JSON step). Routers opt in with ``APIRouter(route_class=FastJSONRoute)`` (FastAPI's
documented custom-route hook); validation, OpenAPI and error bodies are unchanged. Large bodies
leave the event loop altogether (:mod:`service.http.body_pool`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel

from service.http.json_body import parse_json_body

if TYPE_CHECKING:
    from service.http.body_pool import BodyParsePool


class FastJSONRequest(Request):
    """A request whose ``json()`` is :func:`parse_json_body`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            self._json = parse_json_body(body, self.headers.get("content-encoding"))
        return self._json

    async def parse_elsewhere(self, pool: BodyParsePool, model: type[BaseModel]) -> None:
        """For a large JSON body: parse and validate it in ``pool``'s helper process, keep the
        packed result as this request's JSON, or raise the 422 the route would have raised."""
        if not _is_json(self.headers.get("content-type")):
            return  # FastAPI refuses it as it is
        body = await self.body()
        if not pool.wants(body):
            return
        parsed = await pool.parse(body, self.headers.get("content-encoding"), model)
        if parsed.json_error is not None:
            raise json_invalid(*parsed.json_error)
        if parsed.errors is not None:
            raise RequestValidationError(parsed.errors)
        self._json = parsed.body


def json_invalid(message: str, position: int) -> RequestValidationError:
    """The 422 FastAPI gives a body that is not JSON (its error type, location and wording)."""
    return RequestValidationError(
        [
            {
                "type": "json_invalid",
                "loc": ("body", position),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": message},
            }
        ]
    )


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI would read a body of this type as JSON (absent counts)."""
    if not content_type:
        return True
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


class FastJSONRoute(APIRoute):
    """An ``APIRoute`` that hands its endpoint a :class:`FastJSONRequest`; a large body whose
    model has ``packed()`` is parsed in the app's :class:`BodyParsePool` (when the app state
    has one: ``app.state.attnserve.body_pool``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        # Only bodies whose model can pack itself (``packed()``: long number lists as arrays)
        # gain from the trip; others are parsed here.
        annotation = self.body_field.field_info.annotation if self.body_field else None
        model: type[BaseModel] | None = None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation if hasattr(annotation, "packed") else None

        async def route(request: Request) -> Response:
            fast = FastJSONRequest(request.scope, request.receive)
            state = getattr(request.app.state, "attnserve", None)
            pool = getattr(state, "body_pool", None)
            if model is not None and pool is not None:
                await fast.parse_elsewhere(pool, model)
            return await handler(fast)

        return route
