"""Pure ASGI middleware (not ``BaseHTTPMiddleware``, which hides client disconnects): request ids,
request metrics and the body size limit.

Order, outermost first: :class:`RequestContext` (id, timing, request metrics, status of anything
that escaped as an exception) -> :class:`BodyLimit` -> the app's exception middleware -> routes.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BodyTooLarge, error_response
from service.metrics import Metrics

REQUEST_ID_HEADER = "x-request-id"
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_state(scope: Scope) -> dict[str, Any]:
    """The per-request dict behind ``request.state`` (routes put metric labels there)."""
    state: dict[str, Any] = scope.setdefault("state", {})
    return state


class RequestContext:
    """Gives each request an id (the client's ``x-request-id`` if sane, else a new one), echoes
    it in the response, and records ``attnserve_requests_total`` and
    ``attnserve_request_duration_seconds`` with the labels the route left in ``request.state``."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = dict(scope.get("headers", ())).get(REQUEST_ID_HEADER.encode(), b"").decode(
            "latin-1"
        )
        request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        state = request_state(scope)
        state["request_id"] = request_id
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            status = 500  # the catch-all handler outside answers 500 (and re-raises)
            raise
        finally:
            self._record(scope, state, status, time.perf_counter() - started)

    def _record(self, scope: Scope, state: dict[str, Any], status: int, seconds: float) -> None:
        route = scope.get("route")
        endpoint = getattr(route, "path", None) or "unmatched"
        labels = (endpoint, state.get("model", ""), state.get("attention", ""), str(status))
        self.metrics.requests.labels(*labels).inc()
        self.metrics.request_duration.labels(*labels).observe(seconds)


class BodyLimit:
    """Refuses bodies over ``max_bytes`` with a 413: at once from ``Content-Length``, or while
    streaming for chunked bodies (the route's body read raises :class:`BodyTooLarge`)."""

    def __init__(self, app: ASGIApp, max_bytes: int, metrics: Metrics) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics

    def _too_large(self) -> BodyTooLarge:
        self.metrics.rejections.labels("", "body_too_large").inc()
        return BodyTooLarge(f"request body is over the limit of {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await error_response(self._too_large())(scope, receive, send)
            return
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited_receive, send)
