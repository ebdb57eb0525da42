"""Dependencies shared by the routes: app state, API key, readiness gate, metric labels."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request, Response

from models.attention import BACKENDS
from service.batching.batcher import Batcher
from service.batching.job import JobResult
from service.errors import InvalidRequest, NotReady, ShuttingDown, Unauthorized
from service.middleware import request_state
from service.registry import Registry
from service.settings import Settings
from service.state import AppState


async def get_app_state(request: Request) -> AppState:
    # async: FastAPI would run a plain def in its thread pool, a hop per request for nothing.
    state: AppState = request.app.state.attnserve
    return state


AppStateDep = Annotated[AppState, Depends(get_app_state)]


async def require_api_key(request: Request, state: AppStateDep) -> None:
    """401 unless ``Authorization: Bearer <api_key>`` matches (when a key is configured)."""
    expected = state.settings.api_key_value
    if expected is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        state.metrics.rejections.labels("", "unauthorized").inc()
        raise Unauthorized("missing or invalid API key; send 'Authorization: Bearer <key>'")


@dataclass
class Serving:
    """What a model route needs once the server is ready."""

    settings: Settings
    registry: Registry
    batcher: Batcher


async def require_serving(state: AppStateDep) -> AsyncIterator[Serving]:
    """503 while loading or draining; otherwise the loaded models and their batcher. Counts the
    request as in flight until it is answered, so a drain can wait for it."""
    lifecycle = state.lifecycle
    if lifecycle.draining:
        state.metrics.rejections.labels("", "shutting_down").inc()
        raise ShuttingDown("the server is shutting down; retry on another replica")
    if not lifecycle.ready or state.registry is None or state.batcher is None:
        state.metrics.rejections.labels("", "not_ready").inc()
        raise NotReady(f"the server is not ready yet ({lifecycle.detail})")
    lifecycle.inflight += 1
    state.metrics.requests_in_flight.inc()  # set here, not read at scrape: exact across workers
    try:
        yield Serving(state.settings, state.registry, state.batcher)
    finally:
        lifecycle.inflight -= 1
        state.metrics.requests_in_flight.dec()


ServingDep = Annotated[Serving, Depends(require_serving)]
AUTH = [Depends(require_api_key)]


def label(request: Request, model: str | None = None, attention: str | None = None) -> None:
    """Metric labels for this request; only known names, so label values stay bounded."""
    state = request_state(request.scope)
    if model is not None:
        state["model"] = model
    if attention is not None and attention in BACKENDS:
        state["attention"] = attention


def check_count(n: int, limit: int, what: str) -> None:
    if n == 0:
        raise InvalidRequest(f"{what} must not be empty")
    if n > limit:
        raise InvalidRequest(f"too many {what}: {n}; at most {limit} per request")


def disconnect_waiter(request: Request) -> Any:
    """A coroutine function that returns once the client has gone (the body is already read,
    so the next ASGI message is ``http.disconnect``)."""

    async def wait() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    return wait


def set_timing_headers(response: Response, result: JobResult) -> None:
    """``x-queue-time-ms``, ``x-inference-time-ms``, ``x-batch-size`` (rows in the forward pass)
    and ``x-batch-requests`` (requests merged into it)."""
    response.headers["x-queue-time-ms"] = f"{result.queue_s * 1000:.2f}"
    response.headers["x-inference-time-ms"] = f"{result.batch.inference_s * 1000:.2f}"
    response.headers["x-batch-size"] = str(result.batch.rows)
    response.headers["x-batch-requests"] = str(result.batch.requests)
