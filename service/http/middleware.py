"""Pure ASGI middleware (not ``BaseHTTPMiddleware``, which hides client disconnects): request ids,
request metrics, the API key and the body size limit.

Order, outermost first: :class:`RequestContext` (id, timing, request metrics, and the 500 answer
for anything that escaped the app's handlers) -> :class:`ApiKeyGate` -> :class:`BodyLimit` -> the
app's exception middleware -> routes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import secrets
import time
import uuid
from collections import OrderedDict
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BodyTooLarge, InternalError, Unauthorized, error_body, error_response
from service.observability.metrics import Metrics

log = logging.getLogger("attnserve")

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
        # A random per-process prefix plus a counter: unique, and no urandom call per request.
        self._prefix = uuid.uuid4().hex[:12]
        self._counter = itertools.count(1)

    def _new_id(self) -> str:
        return f"{self._prefix}-{next(self._counter):08x}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = (
            dict(scope.get("headers", ())).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        )
        request_id = incoming if _SAFE_ID.match(incoming) else self._new_id()
        state = request_state(scope)
        state["request_id"] = request_id
        status, response_started = 500, False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status, response_started = message["status"], True
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            # Anything the app's handlers did not turn into a response: answer the one 500 body
            # here (with the request id; Starlette's outer handler would send it without), log
            # the details, and record 500.
            status = 500
            if response_started:
                raise
            log.error(
                "unexpected error in %s %s (request %s)",
                scope.get("method"),
                scope.get("path"),
                request_id,
                exc_info=exc,
            )
            internal = InternalError("internal error; the server logged the details")
            await error_response(internal)(scope, receive, send_with_id)
        finally:
            self._record(scope, state, status, time.perf_counter() - started)

    def _record(self, scope: Scope, state: dict[str, Any], status: int, seconds: float) -> None:
        route = scope.get("route")
        endpoint = getattr(route, "path", None) or "unmatched"
        labels = (
            endpoint,
            state.get("model", ""),
            state.get("attention", ""),
            state.get("precision", ""),
            str(status),
        )
        self.metrics.requests.labels(*labels).inc()
        self.metrics.request_duration.labels(*labels).observe(seconds)


class ConnectionRecycler:
    """Answers with ``Connection: close`` once a keep-alive connection is older than
    ``max_age_s``, so clients reconnect on a schedule. With several worker processes on one port
    the kernel spreads new connections over the live workers: after a worker dies and is
    replaced, its clients' connections reach the replacement within ``max_age_s`` instead of
    staying pinned to the survivors for ever."""

    MAX_TRACKED = 65536  # connections remembered (oldest forgotten first: a bounded table)

    def __init__(self, app: ASGIApp, max_age_s: float) -> None:
        self.app = app
        self.max_age_s = max_age_s
        self._first_seen: OrderedDict[tuple[Any, ...], float] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_age_s <= 0:
            await self.app(scope, receive, send)
            return
        # One TCP connection = one (client address, server address) pair for its lifetime.
        key = (tuple(scope.get("client") or ()), tuple(scope.get("server") or ()))
        now = time.monotonic()
        first = self._first_seen.setdefault(key, now)
        if len(self._first_seen) > self.MAX_TRACKED:
            self._first_seen.popitem(last=False)
        close = now - first >= self.max_age_s
        if close:
            self._first_seen.pop(key, None)

        async def send_closing(message: Message) -> None:
            if close and message["type"] == "http.response.start":
                MutableHeaders(scope=message)["connection"] = "close"
            await send(message)

        await self.app(scope, receive, send_closing)


class ApiKeyGate:
    """With an API key set, answers 401 to a model route without ``Authorization: Bearer <key>``
    before anything reads its body (an unauthenticated client gets no parsing, no validation and
    no body buffering). Health, readiness, metrics and the API docs stay open; every other path
    needs the key, so a route added later is guarded without being listed here."""

    OPEN = frozenset(
        (
            "/healthz",
            "/readyz",
            "/metrics",
            "/docs",
            "/docs/oauth2-redirect",
            "/redoc",
            "/openapi.json",
            "/health",  # text-embeddings-inference's public probes
            "/ping",
        )
    )
    # Open for GET only: GET / is TEI's health check, POST / a model route.
    OPEN_GET = frozenset(("/",))

    def __init__(self, app: ASGIApp, api_key: str | None, metrics: Metrics) -> None:
        self.app = app
        self.expected = api_key.encode() if api_key else None
        self.metrics = metrics

    def _allowed(self, scope: Scope) -> bool:
        if self.expected is None or scope["path"] in self.OPEN:
            return True
        if scope["path"] in self.OPEN_GET and scope["method"] == "GET":
            return True
        header = dict(scope.get("headers", ())).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        return scheme.lower() == b"bearer" and secrets.compare_digest(given.strip(), self.expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        self.metrics.rejections.labels("", "unauthorized").inc()
        exc = Unauthorized("missing or invalid API key; send 'Authorization: Bearer <key>'")
        await error_response(exc)(scope, receive, send)


class BodyTimeout(StarletteHTTPException):
    """The whole body did not come within ``body_timeout_s`` of the request's start (raised
    from ``receive``, so the route that reads the body answers it: a 408 with the error body)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            408,
            f"the request body stalled: it did not all arrive within {seconds:g} s of the "
            "headers; send the body at once",
        )


class BodyLimit:
    """Refuses bodies over ``max_bytes`` with a 413 before any route runs: from
    ``Content-Length`` at once, or, for chunked bodies, by reading at most ``max_bytes + 1``
    bytes first and replaying them to the app (the server enforces ``Content-Length`` framing,
    so a declared length cannot be exceeded). The 413 closes the connection after a lingering
    close (:mod:`service.http.linger`): the client reads it, not a reset. A body not all in
    within ``timeout_s`` of the request reaching the app (just after its headers) gets a 408:
    one deadline for the whole body, not one per chunk, since a byte every few seconds would
    otherwise hold the connection for as long as the client liked (issue 50 item 2). After the
    body, ``receive`` waits for a disconnect untimed."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, metrics: Metrics, timeout_s: float = 30.0
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.timeout_s = timeout_s

    def _timed(self, receive: Receive) -> Receive:
        done = False
        deadline = time.monotonic() + self.timeout_s

        async def timed_receive() -> Message:
            nonlocal done
            if done:
                return await receive()
            try:
                left = max(0.0, deadline - time.monotonic())
                message = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                self.metrics.rejections.labels("", "body_timeout").inc()
                raise BodyTimeout(self.timeout_s) from None
            done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return timed_receive

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.metrics.rejections.labels("", "body_too_large").inc()
        # Connection: close, so the rest of the body is not parsed as long as the client likes:
        # the server reads and discards it for a bounded time (a lingering close), then closes
        # (service.http.linger), and the client reads this answer, not a reset.
        exc = BodyTooLarge(
            f"request body is over the limit of {self.max_bytes} bytes",
            headers={"connection": "close"},
        )
        await error_response(exc)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        receive = self._timed(receive)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.max_bytes:
                await self._refuse(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        # No declared length (chunked): buffer up to the limit, then replay.
        buffered: list[Message] = []
        seen = 0
        while True:
            try:
                message = await receive()
            except BodyTimeout as exc:
                body = error_body("body_timeout", str(exc.detail))
                await JSONResponse(body, exc.status_code)(scope, receive, send)
                return
            buffered.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)
