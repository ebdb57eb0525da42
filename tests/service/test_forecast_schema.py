"""Forecast histories validated as arrays (``service.http.schemas.arrays.number_array``) and
forecasts rendered without re-validation (``forecast_json``): the same answers, refusals and bytes
as the strict per-number walk and FastAPI's ``response_model`` serialisation."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.http.schemas.arrays import number_array
from service.http.schemas.forecast import ForecastRequest, ForecastResponse, forecast_json
from tests.service.helpers import TINY_FORECAST, hourly_series

CHANNELS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def _rows(n: int = 40) -> list[list[float]]:
    return np.round(np.random.default_rng(0).normal(3, 1, (n, 7)), 3).tolist()


def test_rows_and_columns_of_numbers_become_float64_arrays() -> None:
    rows = _rows()
    rows[3][2] = 1.0  # exact 0 and 1 are looked at one by one: still numbers
    rows[4][0] = 0
    rows[5][6] = 12  # an integer is a number (the strict schema takes it as a float)
    request = ForecastRequest.model_validate(
        {
            "model": "m",
            "series": [
                {"start": "2017-01-01 00:00:00", "values": rows},
                {"start": "2017-01-01 00:00:00", "columns": {"OT": [r[6] for r in rows]}},
            ],
        }
    )
    values, columns = request.series[0].values, request.series[1].columns
    assert isinstance(values, np.ndarray) and values.dtype == np.float64
    assert values.tolist() == [[float(x) for x in r] for r in rows]
    assert columns is not None and isinstance(columns["OT"], np.ndarray)
    assert columns["OT"].tolist() == [float(r[6]) for r in rows]


@pytest.mark.parametrize(
    "bad",
    [True, False, None, "1.5", [1.0], {"x": 1.0}, 10**400],
    ids=["true", "false", "null", "string", "list", "object", "huge int"],
)
@pytest.mark.parametrize("layout", ["values", "columns"])
def test_anything_but_a_number_is_refused_as_the_strict_schema_does(bad: Any, layout: str) -> None:
    rows = _rows()
    rows[17][5] = 1.0  # a true beside real 1.0s must still be found
    rows[20][5] = bad
    if layout == "values":
        series: dict[str, Any] = {"start": "2017-01-01 00:00:00", "values": rows}
    else:
        series = {"start": "2017-01-01 00:00:00", "columns": {"LULL": [r[5] for r in rows]}}
    if layout == "values" and bad is None:
        # A null in a row is a missing value: zero-shot forecasters take it, the others name
        # the row in a 422 (test_missing_value_in_rows_is_kept_for_the_forecaster).
        request = ForecastRequest.model_validate({"model": "m", "series": [series]})
        assert request.series[0].values is not None and request.series[0].values[20][5] is None
        return
    with pytest.raises(ValidationError) as caught:
        ForecastRequest.model_validate({"model": "m", "series": [series]})
    assert caught.value.errors()[0]["loc"][:3] == ("series", 0, layout)


def test_number_array_leaves_what_it_cannot_vouch_for_to_pydantic() -> None:
    assert number_array([[1.5, 2.5], [3.5]], 2) is None  # ragged: the forecaster names the row
    assert number_array([[1.5, True]], 2) is None
    assert number_array([1.5, 2.5], 2) is None  # wrong depth
    assert number_array((1.5, 2.5), 1) is None  # not a JSON list
    assert number_array([2**70, 1.5], 1) is None  # past int64: numpy would make objects
    # Mostly zeros and ones: checking each for a bool costs more than pydantic's walk.
    assert number_array([0.0] * 100, 1) is None
    got = number_array([[5, 2], [3, 4]], 2)
    assert got is not None and got.dtype == np.float64 and got.tolist() == [[5, 2], [3, 4]]
    empty = number_array([], 1)
    assert empty is not None and empty.shape == (0,)


def test_ragged_and_narrow_rows_keep_their_messages(client: TestClient) -> None:
    good = hourly_series(24)
    narrow = {**good, "values": [r[:6] for r in good["values"]]}  # an array of 6 columns
    ragged = {**good, "values": [*good["values"][:3], good["values"][3][:5], *good["values"][4:]]}
    for series, needles in ((narrow, ["row 0 has 6 values", "7 values"]), (ragged, ["row 3"])):
        r = client.post("/forecast", json={"model": TINY_FORECAST, "series": [series]})
        assert r.status_code == 422, r.text
        message = r.json()["error"]["message"]
        assert all(n in message for n in needles), message


def test_forecast_json_is_the_response_models_own_rendering() -> None:
    forecasts = [
        {
            "timestamps": ["2017-01-01 00:00:00", "2017-01-01 01:00:00"],
            "values": [[1.0, 30.459999084472656, 1e16], [float("nan"), -0.1, float("inf")]],
        }
    ]
    rendered = forecast_json("informer-é", "flash", 2, forecasts)
    model = ForecastResponse.model_validate(
        {"model": "informer-é", "attention": "flash", "horizon": 2, "forecasts": forecasts}
    )
    # Fields a forecast does not have (quantiles of a point model) are left out, not null.
    assert rendered == model.model_dump_json(exclude_none=True).encode()
    assert json.loads(rendered)["forecasts"][0]["values"][1][0] is None


def test_forecast_route_still_documents_and_answers_its_response_model(
    client: TestClient,
) -> None:
    spec = client.get("/openapi.json").json()
    ok = spec["paths"]["/forecast"]["post"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"] == {"$ref": "#/components/schemas/ForecastResponse"}
    r = client.post(
        "/forecast", json={"model": TINY_FORECAST, "series": [hourly_series(24)], "horizon": 3}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = ForecastResponse.model_validate_json(r.content)
    assert body.horizon == 3 and len(body.forecasts[0].values) == 3
    assert all(math.isfinite(v) for row in body.forecasts[0].values for v in row)
    for header in ("x-queue-time-ms", "x-inference-time-ms", "x-batch-size", "x-request-id"):
        assert header in r.headers
