"""Dependencies shared by the routes: app state, readiness gate (the engine), the caller,
response headers. (The API key is checked earlier, before the body is read: ``ApiKeyGate``.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request, Response

from service.engine.engine import Answer, Client, Engine
from service.errors import InvalidRequest, NotReady, ShuttingDown
from service.http.middleware import request_state
from service.observability.spans import note_answered, note_parsed
from service.state import AppState


async def get_app_state(request: Request) -> AppState:
    # async: FastAPI would run a plain def in its thread pool, a hop per request for nothing.
    state: AppState = request.app.state.attnserve
    return state


AppStateDep = Annotated[AppState, Depends(get_app_state)]


async def require_engine(state: AppStateDep) -> AsyncIterator[Engine]:
    """503 while loading or draining; otherwise the engine over the loaded models. Counts the
    request as in flight until it is answered, so a drain can wait for it."""
    lifecycle = state.lifecycle
    if lifecycle.draining:
        state.metrics.rejections.labels("", "shutting_down").inc()
        raise ShuttingDown("the server is shutting down; retry on another replica")
    if not lifecycle.ready or state.engine is None:
        state.metrics.rejections.labels("", "not_ready").inc()
        raise NotReady(f"the server is not ready yet ({lifecycle.detail})")
    lifecycle.inflight += 1
    state.metrics.requests_in_flight.inc()  # set here, not read at scrape: exact across workers
    try:
        yield state.engine
    finally:
        lifecycle.inflight -= 1
        state.metrics.requests_in_flight.dec()


EngineDep = Annotated[Engine, Depends(require_engine)]


def client_of(request: Request) -> Client:
    """The engine's view of the caller: request id, metric labels, and a coroutine function that
    returns once the client has gone (the body is already read, so the next ASGI message is
    ``http.disconnect``)."""

    async def disconnected() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    state = request_state(request.scope)
    note_parsed()  # the trace's parse span ends here, at the engine call
    return Client(state.get("request_id", ""), state, disconnected)


def set_timing_headers(response: Response, answer: Answer) -> None:
    """``x-model`` and ``x-attention`` (what ran: the only place a bare-list answer such as
    ``/embed``'s says it), ``x-queue-time-ms``, ``x-inference-time-ms``, ``x-batch-size`` (rows
    in the forward pass), ``x-batch-requests`` (requests merged into it), ``x-precision`` (the
    precision that ran), for ``attention: "auto"``, ``x-attention-choice`` (what ran and
    why) and, where layers ran exact attention instead of the backend asked for (a decoder's
    causal layers under a backend without a causal form), ``x-attention-fallback`` (which, and
    why)."""
    result = answer.result
    note_answered()  # the trace's render span starts here
    response.headers["x-model"] = answer.model
    response.headers["x-attention"] = answer.attention
    response.headers["x-queue-time-ms"] = f"{result.queue_s * 1000:.2f}"
    response.headers["x-inference-time-ms"] = f"{result.batch.inference_s * 1000:.2f}"
    response.headers["x-batch-size"] = str(result.batch.rows)
    response.headers["x-batch-requests"] = str(result.batch.requests)
    response.headers["x-precision"] = answer.precision
    if answer.choice is not None:
        response.headers["x-attention-choice"] = answer.choice
    if answer.fallback is not None:
        response.headers["x-attention-fallback"] = answer.fallback


XModel = Annotated[
    str | None,
    Header(
        description="Which loaded model answers (as the body's model field): how TEI's routes, "
        "whose bodies name no model, pick one of several."
    ),
]


def chosen(field: str | None, header: str | None) -> str | None:
    """The model a request names by its ``model`` field or ``x-model`` header (None: neither).

    Raises:
        InvalidRequest: the two name different models.
    """
    if field is not None and header is not None and field != header:
        raise InvalidRequest(
            f"the model field ({field!r}) and the x-model header ({header!r}) disagree; "
            "send one of them"
        )
    return field if field is not None else header
