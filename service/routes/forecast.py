"""``POST /forecast``: Informer forecasts with a per-request attention backend."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, cast

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from service.batching.policy import BatchKey
from service.middleware import request_state
from service.routes.deps import (
    AUTH,
    ServingDep,
    check_count,
    disconnect_waiter,
    label,
    set_timing_headers,
)
from service.routes.encode import ERRORS
from service.routes.fast_json import FastJSONRoute
from service.schemas import ForecastOut, ForecastRequest, ForecastResponse
from service.servables.base import ForecastModel

router = APIRouter(tags=["models"], dependencies=AUTH, route_class=FastJSONRoute)

INLINE_PREPARE_ROWS = 1024


def _finish(cut: Any, horizon: int, forecasts: list[Any]) -> list[dict[str, Any]]:
    return [cut(f, horizon) for f in forecasts]


@router.post("/forecast", response_model=ForecastResponse, responses=ERRORS)  # type: ignore[arg-type]
async def forecast(
    body: ForecastRequest, request: Request, response: Response, serving: ServingDep
) -> ForecastResponse:
    """Forecast each series' next ``horizon`` steps in original units."""
    label(request, attention=body.attention)
    servable = cast(ForecastModel, serving.registry.get(body.model, "forecast"))
    backend = body.attention or servable.default_attention
    label(request, servable.name, backend)
    check_count(len(body.series), serving.settings.max_inputs_per_request, "series")
    horizon = servable.check_horizon(body.horizon)
    options = servable.check_attention(backend, body.attention_options)
    series: list[Mapping[str, Any]] = [
        {"timestamps": s.timestamps, "start": s.start, "values": s.values, "columns": s.columns}
        for s in body.series
    ]
    if sum(s.rows() for s in body.series) <= INLINE_PREPARE_ROWS:
        windows = servable.prepare(series)  # a few ms: cheaper inline than a thread hop
    else:  # big requests: keep the event loop free while pandas parses
        windows = await run_in_threadpool(servable.prepare, series)
    lengths = [servable.context] * len(windows)
    # Every window is cut to the model's context, so one length bucket per model.
    key = BatchKey(backend, tuple(options.items()), (), servable.context)
    result = await serving.batcher.submit(
        servable.name,
        key,
        windows,
        lengths,
        finish=partial(_finish, servable.cut, horizon),
        disconnected=disconnect_waiter(request),
        request_id=request_state(request.scope).get("request_id", ""),
    )
    set_timing_headers(response, result)
    return ForecastResponse(
        model=servable.name,
        attention=backend,
        horizon=horizon,
        forecasts=[ForecastOut(**f) for f in result.value],
    )
