"""``/healthz`` (alive), ``/readyz`` (loaded, warmed up, not draining), ``/metrics``. Never gated
by the API key."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.errors import NotReady, ShuttingDown, error_response
from service.http.routes.deps import AppStateDep
from service.http.schemas.common import ErrorBody, Health
from service.lifecycle import Phase
from service.observability.metrics import CONTENT_TYPE

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": ErrorBody}})
async def healthz(state: AppStateDep) -> JSONResponse:
    """200 while the process works (also while loading and draining); 503 if start-up failed,
    so an orchestrator restarts it."""
    lifecycle = state.lifecycle
    if lifecycle.phase is Phase.FAILED:
        return error_response(NotReady(f"start-up failed: {lifecycle.detail}"))
    return JSONResponse(Health(status="ok", detail=lifecycle.phase.value).model_dump())


@router.get("/readyz", response_model=Health, responses={503: {"model": ErrorBody}})
async def readyz(state: AppStateDep) -> JSONResponse:
    """200 once every model is loaded and warmed up; 503 before that and while draining."""
    lifecycle = state.lifecycle
    if lifecycle.ready:
        return JSONResponse(Health(status="ready", detail=lifecycle.detail).model_dump())
    if lifecycle.draining:
        return error_response(ShuttingDown("the server is shutting down"))
    return error_response(NotReady(f"not ready: {lifecycle.detail}"))


@router.get("/metrics", response_class=Response)
async def metrics(state: AppStateDep) -> Response:
    """Prometheus text format."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
