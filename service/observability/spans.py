"""A trace per request: the server span and its children (parse, queue, batch, forward, render).

W3C Trace Context in (https://www.w3.org/TR/trace-context/): the ``traceparent`` and
``tracestate`` headers, read by the SDK's W3C propagator. A header that does not parse is
ignored, as the specification's processing model says (a ``traceparent`` that fails to parse is
replaced by a new one, and ``tracestate`` is dropped with it), so such a request gets a trace of
its own and is served as usual.

The server span follows OpenTelemetry's HTTP semantic conventions (``{method} {route}``,
``http.request.method``, ``http.route``, ``http.response.status_code``, ``url.path``, ...:
https://opentelemetry.io/docs/specs/semconv/http/http-spans/), plus ``attnserve.request_id``
(the id :class:`service.http.middleware.RequestContext` gives the request and echoes in
``x-request-id``) and the model, attention backend and precision the route recorded for the
metrics. Its children, each with an explicit start and end:

* ``parse``: from the request's start to the engine call (body read, JSON, validation);
* ``queue``: waiting for a batch (as ``x-queue-time-ms``);
* ``batch``: from leaving the queue to the answer, with ``forward`` under it: the model's
  forward pass (model, backend, precision, batch rows, requests and tokens, the request's rows
  and tokens or time steps);
* ``render``: from the engine's answer to the last byte of the response.

Why a child span per request, recorded after the fact, and not a span per batch with links:
the forward pass runs on a worker thread for several requests at once, each from its own trace.
A span belongs to one trace, so a batch span would sit in none of them and could only link to
them, and a trace viewer would show each request without its forward pass. The worker already
measures each request's queue time and its batch's inference time and hands them back with the
answer (:class:`~service.engine.batching.job.JobResult`); the spans are made from those figures
on the event loop, in the request's own context, so nothing of OpenTelemetry crosses the thread
(or, for large bodies, process) boundary and the worker thread does no tracing work at all.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.observability.tracing import Tracing

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = (b"traceparent", b"tracestate")
# Methods the HTTP conventions name; any other is reported as _OTHER (bounded values).
_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT"))
# Probes and scrapes: a trace every few seconds per prober, of nothing (TEI's ping likewise).
UNTRACED = frozenset(("/healthz", "/readyz", "/metrics", "/health", "/ping"))


class RequestTrace:
    """One request's server span and the moments its children are cut at."""

    def __init__(self, tracer: Tracer, span: Span, started_ns: int) -> None:
        self.tracer, self.span, self.started_ns = tracer, span, started_ns
        self.context = set_span_in_context(span)
        self.parsed_ns: int | None = None  # the engine call began
        self.answered_ns: int | None = None  # the engine answered
        self.responding_ns: int | None = None  # the response's first message

    def child(self, name: str, start_ns: int, end_ns: int, **attributes: Any) -> Span:
        """A finished child span of the server span."""
        span = self.tracer.start_span(
            name, self.context, start_time=start_ns, attributes=_clean(attributes)
        )
        span.end(end_time=max(start_ns, end_ns))
        return span


_CURRENT: ContextVar[RequestTrace | None] = ContextVar("attnserve_trace", default=None)


def note_parsed() -> None:
    """The request's body is parsed and the engine is about to be called (cuts ``parse``)."""
    trace = _CURRENT.get()
    if trace is not None and trace.parsed_ns is None:
        trace.parsed_ns = time.time_ns()


def note_answered() -> None:
    """The engine answered; rendering begins (starts ``render``)."""
    trace = _CURRENT.get()
    if trace is not None:
        trace.answered_ns = time.time_ns()


def trace_job(model: str, job: Any, result: Any) -> Any:
    """Record the ``queue``, ``batch`` and ``forward`` spans of a finished job (a
    :class:`~service.engine.batching.job.Job` and its
    :class:`~service.engine.batching.job.JobResult`, which it returns) under the request's
    server span. The job's clock is ``time.monotonic()``; spans take wall-clock nanoseconds."""
    trace = _CURRENT.get()
    if trace is None:
        return result
    now_ns, now_mono = time.time_ns(), time.monotonic()

    def wall(mono: float) -> int:
        return now_ns - int((now_mono - mono) * 1e9)

    key, batch = job.key, result.batch
    queued_ns = wall(job.enqueued_at)
    left_ns = wall(job.enqueued_at + result.queue_s)
    # The figures once, on the forward span (each attribute costs the SDK a check and the
    # exporter an encoding; the server span already names model, attention and precision).
    trace.child("queue", queued_ns, left_ns, **{"attnserve.model": model})
    span = trace.child("batch", left_ns, now_ns, **{"attnserve.batch.requests": batch.requests})
    # The forward pass (or, for a request run in parts, its parts' summed time) begins as the
    # request leaves the queue.
    forward_end = left_ns + int(batch.inference_s * 1e9)
    forward = trace.tracer.start_span(
        "forward",
        set_span_in_context(span),
        start_time=left_ns,
        attributes={
            "attnserve.model": model,
            "attnserve.attention": key.backend,
            "attnserve.precision": key.precision,
            "attnserve.batch.rows": batch.rows,
            "attnserve.batch.requests": batch.requests,
            "attnserve.batch.tokens": batch.tokens,
            "attnserve.request.rows": len(job.rows),
            "attnserve.request.tokens": sum(job.lengths),
        },
    )
    forward.end(end_time=forward_end)
    return result


class TraceRequests:
    """ASGI middleware: a server span per HTTP request, in the context of the request's
    ``traceparent``; it also starts the app's :class:`~service.observability.tracing.Tracing`
    at the ASGI lifespan's start and stops it (sending the last spans) at its end, after the
    app has drained. Installed only when tracing is on (``service.app.create_app``), inside
    :class:`~service.http.middleware.RequestContext`, whose request id it reports."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        tracer = self.tracing.tracer
        if scope["type"] != "http" or tracer is None or scope.get("path") in UNTRACED:
            await self.app(scope, receive, send)
            return
        started = time.time_ns()
        headers = dict(scope.get("headers", ()))
        carrier = {k.decode(): headers[k].decode("latin-1") for k in _TRACE_HEADERS if k in headers}
        method = scope.get("method", "GET")
        span = tracer.start_span(
            method if method in _METHODS else "HTTP",
            _PROPAGATOR.extract(carrier),  # malformed: an empty context, so a new trace
            SpanKind.SERVER,
            start_time=started,
            attributes=_request_attributes(scope, method, headers),
        )
        if not span.is_recording():  # sampled out: no children either
            await self.app(scope, receive, send)
            return
        trace = RequestTrace(tracer, span, started)
        token = _CURRENT.set(trace)
        status = 500

        async def traced_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status, trace.responding_ns = message["status"], time.time_ns()
            await send(message)

        try:
            await self.app(scope, receive, traced_send)
        except Exception as exc:  # RequestContext, outside, answers the 500
            span.record_exception(exc)
            raise
        finally:
            _CURRENT.reset(token)
            _finish(trace, scope, method, status)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def starting() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.tracing.start()
            return message

        async def stopping(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await asyncio.to_thread(self.tracing.stop)
            await send(message)

        await self.app(scope, starting, stopping)


def _request_attributes(scope: Scope, method: str, headers: dict[bytes, bytes]) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "http.request.method": method if method in _METHODS else "_OTHER",
        "url.path": scope.get("path", ""),
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.version": scope.get("http_version", ""),
    }
    if method not in _METHODS:
        attributes["http.request.method_original"] = method
    server, client = scope.get("server"), scope.get("client")
    if server:
        attributes["server.address"], attributes["server.port"] = server[0], server[1]
    if client:
        attributes["client.address"], attributes["client.port"] = client[0], client[1]
    if agent := headers.get(b"user-agent"):
        attributes["user_agent.original"] = agent.decode("latin-1")
    return attributes


def _finish(trace: RequestTrace, scope: Scope, method: str, status: int) -> None:
    """Name the server span after its route, add what the route learnt, cut ``parse`` and
    ``render``, and end it."""
    span, now = trace.span, time.time_ns()
    route = getattr(scope.get("route"), "path", None)
    state = scope.get("state", {})
    if route:
        span.update_name(f"{method if method in _METHODS else 'HTTP'} {route}")
    span.set_attributes(
        _clean(
            {
                "http.route": route,
                "http.response.status_code": status,
                "attnserve.request_id": state.get("request_id"),
                "attnserve.model": state.get("model"),
                "attnserve.attention": state.get("attention"),
                "attnserve.precision": state.get("precision"),
            }
        )
    )
    if status >= 500:  # the conventions: only 5xx mark a server span as failed
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))
    # parse: requests with a body, until the engine call (or, refused before it, the answer).
    parsed = trace.parsed_ns or trace.responding_ns
    if method in ("POST", "PUT", "PATCH") and parsed is not None:
        trace.child("parse", trace.started_ns, parsed)
    if trace.answered_ns is not None:
        trace.child("render", trace.answered_ns, now)
    span.end(end_time=now)


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """Attributes without empty values (OpenTelemetry takes no None)."""
    return {k: v for k, v in attributes.items() if v is not None and v != ""}
