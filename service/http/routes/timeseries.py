"""``POST /v1/timeseries/forecast``: KServe's time series forecast API on this server's engine.

The request and response follow KServe's API reference (kserve/website
``docs/reference/time_series/api.md``, types in kserve/kserve
``python/kserve/kserve/protocol/rest/timeseries/types.py``): ``model``, ``inputs`` (``type``,
``name``, ``series``, ``frequency``, ``start_timestamp``) and ``options`` (``horizon``,
``quantiles``) in; ``outputs`` (one per input, each ``content`` of one forecast with
``mean_forecast``, ``quantiles`` and the forecast's ``start_timestamp``) out. A multivariate
series is rows, time first and variables second, in and out. The forecast's start is the input's
start plus one step per value (the reference's example). Each request becomes the
:class:`ForecastInput` ``POST /forecast`` builds: the same engine call, batching, metrics and
errors. The helpers here serve the SageMaker shape too (:mod:`.sagemaker_forecast`).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic_core import to_json

from service.engine.engine import Answer, Engine
from service.engine.servables.base import ForecastInput
from service.errors import InvalidRequest, ServiceError, from_model_error
from service.http.routes.deps import EngineDep, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.timeseries import (
    KServeForecastRequest,
    KServeForecastResponse,
    forecast_start,
    kserve_step,
)

router = APIRouter(tags=["models"], route_class=FastJSONRoute)

# How the engine names a series in a model's 422 ("series 3: ..."), renamed to the field.
SERIES_PREFIX = re.compile(r"^series (\d+): (?:series(?: '[^']*')?: )?")


def invalid(loc: Sequence[str | int], message: str) -> RequestValidationError:
    """A 422 naming ``body.<loc>``, worded as any validation error of the service."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", *loc), "msg": message, "input": None}]
    )


def read_series(values: Any, loc: Sequence[str | int], rows: bool) -> np.ndarray:
    """A history as float64 rows ``[steps, channels]`` (null: NaN): a flat list is one
    channel; a list of lists is rows (``rows``) or one list per channel."""
    if not values:
        raise invalid(loc, "needs at least one value")
    nested = isinstance(values[0], list)
    if nested:
        widths = {len(v) for v in values}
        if len(widths) != 1 or 0 in widths:
            what = "every row must have the same width" if rows else "variates of one length"
            raise invalid(loc, f"{what}, at least one value each")
    out = np.asarray(values, dtype=np.float64)
    if not nested:
        return out[:, None]
    return out if rows else out.T


def require_zero_shot(engine: Engine, name: str | None, shape: str) -> str:
    """The name of the forecaster ``name`` (an alias, or None: the first loaded forecaster)
    when it is a zero-shot forecaster, the only kind these shapes serve.

    Raises:
        ModelNotFound: no such forecaster is loaded.
        InvalidRequest: it forecasts from a fixed window (Informer, PatchTST, ...).
    """
    loaded = [m for m in engine.registry.models.values() if m.task == "forecast"]
    if name is not None:
        loaded = [m for m in loaded if name in (m.name, *m.aliases)]
    if not loaded:
        engine.registry.get(name, "forecast")  # raises ModelNotFound naming what is loaded
    model = loaded[0]
    if not model.zero_shot:
        raise InvalidRequest(
            f"model {model.name!r} forecasts a fixed window of {model.context} "
            f"rows; the {shape} shape serves zero-shot forecasters (TimesFM 2.5, Chronos-2). "
            "Send it to POST /forecast (series of rows: values or columns)."
        )
    return model.name


async def run_forecast(
    engine: Engine,
    name: str,
    request: Request,
    series: list[dict[str, Any]],
    horizon: int,
    quantiles: Sequence[float],
    extensions: Any,
    what: str,
) -> Answer:
    """``series`` forecast as ``POST /forecast`` forecasts them; a model's 422 about one
    series names it as ``what`` does (``inputs.3``)."""
    job = ForecastInput(
        series,
        horizon,
        extensions.attention,
        extensions.attention_options,
        steps=sum(len(s["values"]) for s in series),
        quantiles=tuple(quantiles),
        precision=extensions.precision,
        model_options=extensions.model_options,
    )
    try:
        return await engine.forecast(name, job, client_of(request))
    except (ServiceError, ValueError) as exc:  # a model's refusal is a ValueError
        error = from_model_error(exc)
        found = SERIES_PREFIX.match(error.message)
        if found is None or type(error) is not InvalidRequest:
            raise
        rest = error.message[found.end() :]
        raise InvalidRequest(f"body.{what}.{found.group(1)}: {rest}") from None


def timing_response(body: Any, answer: Answer) -> Response:
    """``body`` as JSON (non-finite numbers as null) with the timing headers of ``answer``."""
    response = Response(to_json(body, inf_nan_mode="null"), media_type="application/json")
    set_timing_headers(response, answer)
    return response


def per_series(rows: list[list[float]], flat: bool, transpose: bool) -> Any:
    """A forecast's rows ``[H, channels]`` as a shape answers them: one list (``flat``), one
    list per channel (``transpose``) or the rows."""
    if flat:
        return [r[0] for r in rows]
    return [list(c) for c in zip(*rows, strict=True)] if transpose else rows


@router.post(
    "/v1/timeseries/forecast", response_model=KServeForecastResponse, responses=ERROR_RESPONSES
)
async def kserve_forecast(
    body: KServeForecastRequest, request: Request, engine: EngineDep
) -> Response:
    """KServe's time series forecast: each input's next ``options.horizon`` steps, the mean
    forecast and the requested quantiles, in the input's layout."""
    name = require_zero_shot(engine, body.model, "KServe time series")
    series: list[dict[str, Any]] = []
    starts: list[str | None] = []
    for i, s in enumerate(body.inputs):
        multivariate = s.type == "multivariate_time_series"
        if bool(s.series) and isinstance(s.series[0], list) != multivariate:
            want = "a list of rows (time, then variables)" if multivariate else "a flat list"
            raise invalid(("inputs", i, "series"), f"a {s.type} is {want}")
        series.append({"values": read_series(s.series, ("inputs", i, "series"), rows=True)})
        starts.append(None)
        if s.start_timestamp is not None:
            try:
                step = kserve_step(s.frequency)
                starts[i] = forecast_start(s.start_timestamp, len(s.series), step)
            except (ValueError, OverflowError) as exc:
                raise invalid(("inputs", i, "start_timestamp"), f"not a timestamp: {exc}") from None
    options = body.options
    levels = options.quantiles or []
    answer = await run_forecast(
        engine, name, request, series, options.horizon, levels, options, "inputs"
    )
    content = []
    for s, start, got in zip(body.inputs, starts, answer.value, strict=True):
        flat = s.type == "univariate_time_series"
        forecast: dict[str, Any] = {
            "type": s.type,
            "name": s.name,
            "mean_forecast": per_series(got["values"], flat, False),
            "frequency": s.frequency,
            "start_timestamp": start,
        }
        if levels:
            forecast["quantiles"] = {
                str(q): per_series(got["quantiles"][f"{q:g}"], flat, False) for q in levels
            }
        content.append(forecast)
    steps = sum(len(s["values"]) for s in series)
    return timing_response(
        {
            "id": f"fcst-{uuid.uuid4().hex}",
            "created_at": int(time.time()),
            "status": "completed",
            "model": answer.model,
            "outputs": [
                {
                    "type": "time_series_forecast",
                    "id": f"ts-{uuid.uuid4().hex}",
                    "status": "completed",
                    "content": [forecast],
                }
                for forecast in content
            ],
            "usage": {
                "prompt_tokens": steps,
                "completion_tokens": answer.horizon * len(series),
                "total_tokens": steps + answer.horizon * len(series),
            },
            # attnserve extensions (KServe's response allows extra fields)
            "attention": answer.attention,
            "precision": answer.precision,
        },
        answer,
    )
