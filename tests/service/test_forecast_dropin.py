"""The two drop-in forecast shapes (Chronos-2's SageMaker ``/invocations`` and KServe's
``/v1/timeseries/forecast``) answer what ``POST /forecast`` answers for the same series, in
their own layout; bad input is a 422 naming the field, and the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import folders_client
from tests.utils.tiny_timesfm import save_tiny_timesfm

MODEL = "timesfm-tiny"
H = 6
LEVELS = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder = save_tiny_timesfm(Path(tmp_path_factory.mktemp("dropin")) / MODEL)
    with folders_client([folder], body_parse_processes=0) as c:
        yield c


@pytest.fixture(scope="module")
def histories() -> tuple[list[float], list[list[float]]]:
    """One univariate series (40 steps) and one of two channels (70 steps, as rows)."""
    rng = np.random.default_rng(7)
    one = (np.sin(np.arange(40) / 3) + rng.normal(0, 0.1, 40)).tolist()
    two = rng.normal(size=(70, 2)).cumsum(axis=0).tolist()
    return one, two


def reference(client: TestClient, rows: list[list[list[float]]], levels: list[float]) -> list:
    """``POST /forecast``'s forecasts for ``rows`` (each series as rows ``[T, c]``)."""
    body = {
        "model": MODEL,
        "series": [{"values": r} for r in rows],
        "horizon": H,
        "quantiles": levels,
    }
    got = client.post("/forecast", json=body)
    assert got.status_code == 200, got.text
    return got.json()["forecasts"]


def close(got: list, want: list) -> None:
    """Equal numbers (float32 forecasts through JSON), nested lists included."""
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


def columns(rows: list[list[float]]) -> list[list[float]]:
    return [list(c) for c in zip(*rows, strict=True)]


def test_sagemaker_matches_forecast(client: TestClient, histories: tuple) -> None:
    one, two = histories
    body = {
        "inputs": [
            {"target": one, "item_id": "a", "start": "2024-01-01T01:00:00"},
            {"target": columns(two), "item_id": "b"},  # one list per variate
        ],
        "parameters": {"prediction_length": H, "freq": "1h"},
    }
    got = client.post("/invocations", json=body, headers={"x-model": MODEL})
    assert got.status_code == 200, got.text
    assert got.headers["x-model"] == MODEL
    first, second = got.json()["predictions"]
    ref = reference(client, [[[v] for v in one], two], LEVELS)
    # Univariate: flat lists; the default levels are Chronos-2's [0.1, 0.5, 0.9].
    close(first["mean"], [r[0] for r in ref[0]["values"]])
    for q in LEVELS:
        close(first[str(q)], [r[0] for r in ref[0]["quantiles"][f"{q:g}"]])
    # Multivariate: one list per variate.
    close(second["mean"], columns(ref[1]["values"]))
    close(second["0.9"], columns(ref[1]["quantiles"]["0.9"]))
    assert [first["item_id"], second["item_id"]] == ["a", "b"]
    # The forecast starts one hour after the 40th value.
    want = datetime(2024, 1, 1, 1) + timedelta(hours=len(one))
    assert first["start"] == want.isoformat()
    assert "start" not in second


def test_sagemaker_without_a_model_name_and_other_levels(client: TestClient, histories) -> None:
    one, _ = histories
    body: dict[str, Any] = {
        "inputs": [{"target": one[:25]}],
        "parameters": {"prediction_length": H},
    }
    body["parameters"]["quantile_levels"] = [0.25]
    got = client.post("/invocations", json=body)  # the forecast shape picks the forecaster
    assert got.status_code == 200, got.text
    (only,) = got.json()["predictions"]
    ref = reference(client, [[[v] for v in one[:25]]], [0.25])[0]
    assert set(only) == {"mean", "0.25"}
    close(only["0.25"], [r[0] for r in ref["quantiles"]["0.25"]])


def test_kserve_matches_forecast(client: TestClient, histories: tuple) -> None:
    one, two = histories
    body = {
        "model": MODEL,
        "inputs": [
            {
                "type": "univariate_time_series",
                "name": "u",
                "series": one,
                "frequency": "D",
                "start_timestamp": "2025-06-05T13:10:00Z",
            },
            {"type": "multivariate_time_series", "name": "m", "series": two, "frequency": "H"},
        ],
        "options": {"horizon": H, "quantiles": [0.1, 0.9]},
        "metadata": {"request_id": "r1"},
    }
    got = client.post("/v1/timeseries/forecast", json=body)
    assert got.status_code == 200, got.text
    answer = got.json()
    assert answer["status"] == "completed" and answer["model"] == MODEL
    (u,), (m,) = (o["content"] for o in answer["outputs"])
    assert all(o["type"] == "time_series_forecast" for o in answer["outputs"])
    ref = reference(client, [[[v] for v in one], two], [0.1, 0.9])
    close(u["mean_forecast"], [r[0] for r in ref[0]["values"]])
    close(u["quantiles"]["0.1"], [r[0] for r in ref[0]["quantiles"]["0.1"]])
    close(m["mean_forecast"], ref[1]["values"])  # rows: time, then variables
    close(m["quantiles"]["0.9"], ref[1]["quantiles"]["0.9"])
    assert [u["name"], m["name"]] == ["u", "m"]
    assert u["start_timestamp"] == "2025-07-15T13:10:00Z"  # 40 days after the first value
    assert m["start_timestamp"] is None
    assert answer["usage"]["prompt_tokens"] == len(one) + len(two)


def test_kserve_without_quantiles_answers_the_mean_only(client: TestClient, histories) -> None:
    one, _ = histories
    body: dict[str, Any] = {
        "model": MODEL,
        "inputs": [{"type": "univariate_time_series", "name": "u", "series": one[:9]}],
        "options": {"horizon": 3},
    }
    body["inputs"][0]["frequency"] = "M"
    body["inputs"][0]["start_timestamp"] = "2024-01-31"
    got = client.post("/v1/timeseries/forecast", json=body)
    assert got.status_code == 200, got.text
    (content,) = got.json()["outputs"][0]["content"]
    assert "quantiles" not in content and len(content["mean_forecast"]) == 3
    assert content["start_timestamp"].startswith("2024-10-31")  # 9 calendar months on


@pytest.mark.parametrize(
    ("path", "body", "names"),
    [
        ("/invocations", {"inputs": [{"target": [1.0, 2.0]}, {"target": [[1.0], []]}]}, "inputs.1.target"),
        ("/invocations", {"inputs": [{"target": [None, None]}]}, "inputs.0"),
        ("/invocations", {"inputs": [{"target": [1.0], "start": "2024-01-01"}]}, "parameters.freq"),
        ("/invocations", {"inputs": [{"target": [1.0]}], "parameters": {"freq": "nope"}}, "parameters.freq"),
        ("/invocations", {"inputs": [{"target": [1.0, 2.0], "item_id": "a"}, {"target": [3.0], "item_id": "a"}]}, "inputs.1.item_id"),
        ("/invocations", {"inputs": [{"target": "1,2"}]}, "inputs.0.target"),
        ("/v1/timeseries/forecast", {"model": MODEL, "inputs": [{"type": "univariate_time_series", "name": "x", "series": [[1.0]], "frequency": "D"}], "options": {"horizon": 2}}, "inputs.0.series"),
        ("/v1/timeseries/forecast", {"model": MODEL, "inputs": [{"type": "univariate_time_series", "name": "x", "series": [1.0], "frequency": "fortnight"}], "options": {"horizon": 2}}, "inputs.0.frequency"),
        ("/v1/timeseries/forecast", {"model": MODEL, "inputs": [{"type": "univariate_time_series", "name": "x", "series": [1.0], "frequency": "D", "start_timestamp": "soon"}], "options": {"horizon": 2}}, "inputs.0.start_timestamp"),
    ],
)  # fmt: skip
def test_bad_input_is_a_422_naming_the_field(
    client: TestClient, histories: tuple, path: str, body: dict, names: str
) -> None:
    got = client.post(path, json=body, headers={"x-model": MODEL} if path == "/invocations" else {})
    assert got.status_code == 422, got.text
    assert f"body.{names}" in got.json()["error"]["message"]
    # The server still serves the next request.
    again = client.post("/invocations", json={"inputs": [{"target": histories[0]}]})
    assert again.status_code == 200, again.text


def test_an_unknown_model_is_a_404(client: TestClient) -> None:
    body = {
        "model": "nope",
        "inputs": [
            {"type": "univariate_time_series", "name": "x", "series": [1.0], "frequency": "D"}
        ],
        "options": {"horizon": 2},
    }
    assert client.post("/v1/timeseries/forecast", json=body).status_code == 404


def test_the_openapi_schema_documents_both_shapes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/v1/timeseries/forecast"] and "post" in paths["/invocations"]
    card = client.get(f"/models/{MODEL}").json()
    assert "/v1/timeseries/forecast" in card["routes"] and "/invocations" in card["routes"]
