"""``POST /forecast``: forecasts with a per-request attention backend."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.engine.servables.base import EXTRA_INPUTS, ForecastInput
from service.http.routes.deps import EngineDep, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.forecast import ForecastRequest, ForecastResponse, forecast_json

router = APIRouter(tags=["models"], route_class=FastJSONRoute)


@router.post("/forecast", response_model=ForecastResponse, responses=ERROR_RESPONSES)
async def forecast(body: ForecastRequest, request: Request, engine: EngineDep) -> Response:
    """Forecast each series' next ``horizon`` steps in original units."""
    series = [  # the fields as they are (no copy of long histories)
        {"timestamps": s.timestamps, "start": s.start, "values": s.values, "columns": s.columns}
        | {k: getattr(s, k) for k in EXTRA_INPUTS if getattr(s, k) is not None}
        for s in body.series
    ]
    job = ForecastInput(
        series,
        body.horizon,
        body.attention,
        body.attention_options,
        steps=sum(s.rows() for s in body.series),
        max_quality_loss=body.max_quality_loss,
        quantiles=tuple(body.quantiles or ()),
        seed=body.seed,
        precision=body.precision,
        model_options=body.model_options,
    )
    answer = await engine.forecast(body.model, job, client_of(request))
    # Rendered here rather than validated against ForecastResponse and serialised by FastAPI
    # (which would walk every number twice more); ``response_model`` still documents it.
    response = Response(
        forecast_json(
            answer.model, answer.attention, answer.horizon, answer.value, answer.precision
        ),
        media_type="application/json",
    )
    set_timing_headers(response, answer)
    return response
