"""SageMaker's ``POST /invocations`` on a forecaster: Chronos-2's SageMaker JumpStart shape.

Request and response follow the "Endpoint API" section and examples of
amazon-science/chronos-forecasting ``notebooks/deploy-chronos-to-amazon-sagemaker.ipynb``:
``{"inputs": [{"target", "item_id", "start", "past_covariates", "future_covariates"}],
"parameters": {"prediction_length", "quantile_levels", "freq"}}`` in (``target``: one list, or
one list per variate), ``{"predictions": [{"mean", "<level>"..., "item_id", "start"}]}`` out, each
field one list, or one list per variate for a multivariate target; ``start`` is the forecast's
first time (the history's start plus one ``freq`` step per value), ``item_id`` echoed; the
default levels are ``[0.1, 0.5, 0.9]``. ``parameters`` also takes the attnserve extensions
(``attention``, ``attention_options``, ``precision``, ``model_options``).

:mod:`service.http.routes.tei.surface` hands a body here when the model it names (``model`` field or
``x-model`` header) is a forecaster, or, naming none, when the body is this shape. Each request
becomes the :class:`ForecastInput` ``POST /forecast`` builds (the same engine call, batching,
metrics and errors).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from service.engine.engine import Engine
from service.http.routes.timeseries import (
    invalid,
    per_series,
    read_series,
    require_zero_shot,
    run_forecast,
    timing_response,
)
from service.http.schemas.timeseries import (
    SAGEMAKER_LEVELS,
    SageMakerForecastRequest,
    forecast_start,
    pandas_step,
)


def wants_forecast(engine: Engine, name: str | None, data: Any) -> bool:
    """Whether ``/invocations`` answers ``data`` as a forecast: the body is the forecast shape
    (``inputs`` of mappings with a ``target``, which no text-embeddings-inference body is) and
    names no model or a forecaster, or it names a zero-shot forecaster. A text body naming a
    fixed-window forecaster stays with the text routes, whose 422 names ``POST /forecast``."""
    inputs = data.get("inputs") if isinstance(data, dict) else None
    shaped = isinstance(inputs, list) and any(isinstance(s, dict) and "target" in s for s in inputs)
    if name is None:
        return shaped
    found = [m for m in engine.registry.models.values() if name in (m.name, *m.aliases)]
    if not found or found[0].task != "forecast":
        return False
    return shaped or found[0].zero_shot


def parse(data: Any) -> SageMakerForecastRequest:
    """``data`` validated (a 422 naming each bad field, as for any route)."""
    try:
        return SageMakerForecastRequest.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


async def invoke_forecast(
    data: Any, name: str | None, request: Request, engine: Engine
) -> Response:
    """Chronos-2's SageMaker forecast of ``data`` by the forecaster ``name`` (None: the first
    loaded)."""
    body = parse(data)
    name = require_zero_shot(engine, name or body.model, "SageMaker (Chronos-2)")
    p = body.parameters
    if p.predict_batches_jointly:
        raise invalid(
            ("parameters", "predict_batches_jointly"),
            "not supported: each series is forecast on its own here",
        )
    step = None
    if p.freq is not None:
        try:
            step = pandas_step(p.freq)
        except ValueError as exc:
            raise invalid(("parameters", "freq"), f"not a pandas frequency: {exc}") from None
    seen: dict[str, int] = {}
    series: list[dict[str, Any]] = []
    starts: list[str | None] = []
    for i, s in enumerate(body.inputs):
        if s.item_id is not None:
            if s.item_id in seen:
                raise invalid(
                    ("inputs", i, "item_id"), f"{s.item_id!r} is also inputs[{seen[s.item_id]}]"
                )
            seen[s.item_id] = i
        values = read_series(s.target, ("inputs", i, "target"), rows=False)
        start = None
        if s.start is not None:
            if step is None:
                raise invalid(("parameters", "freq"), "needed with a start (e.g. '1h' or 'D')")
            try:
                start = forecast_start(s.start, len(values), step)
            except (ValueError, OverflowError) as exc:
                raise invalid(("inputs", i, "start"), f"not a timestamp: {exc}") from None
        starts.append(start)
        covariates = {
            k: v
            for k, v in (
                ("past_covariates", s.past_covariates),
                ("future_covariates", s.future_covariates),
            )
            if v is not None
        }
        series.append({"values": values, **covariates})
    levels = SAGEMAKER_LEVELS if p.quantile_levels is None else tuple(p.quantile_levels)
    answer = await run_forecast(
        engine, name, request, series, p.prediction_length, levels, p, "inputs"
    )
    predictions = []
    for s, start, got in zip(body.inputs, starts, answer.value, strict=True):
        flat = not (s.target and isinstance(s.target[0], list))
        one: dict[str, Any] = {"mean": per_series(got["values"], flat, True)}
        for q in levels:
            one[str(q)] = per_series(got["quantiles"][f"{q:g}"], flat, True)
        if s.item_id is not None:
            one["item_id"] = s.item_id
        if start is not None:
            one["start"] = start
        predictions.append(one)
    return timing_response({"predictions": predictions}, answer)
