"""Every bad input gets the one error body with the status from the one table, before it joins a
batch, and requests batched at the same moment still succeed."""

from __future__ import annotations

import base64
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from models.attention import BACKENDS, get_backend
from tests.service.helpers import (
    TINY_FORECAST,
    TINY_TEXT,
    Wrapped,
    assert_error,
    hourly_series,
    make_app,
    text_servable,
    wait_until,
)


def forecast_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": TINY_FORECAST, "series": [hourly_series(24)]}
    body.update(overrides)
    return body


def series_with(values: list[list[Any]] | None = None, timestamps: list[str] | None = None) -> dict:
    s = hourly_series(24)
    if values is not None:
        s["values"] = values
    if timestamps is not None:
        s["timestamps"] = timestamps
    return s


GOOD = hourly_series(24)
NAN_ROWS = [row[:] for row in GOOD["values"]]
NAN_ROWS[5][2] = float("nan")
HUGE_ROWS = [row[:] for row in GOOD["values"]]
HUGE_ROWS[7][0] = 1e12
RAGGED = [row[:] for row in GOOD["values"]]
RAGGED[3] = RAGGED[3][:5]
COLUMNS = {
    name: [row[i] for row in GOOD["values"]]
    for i, name in enumerate(["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"])
}
START = GOOD["timestamps"][0]


def b64(values: list[float]) -> str:
    """A column as base64 little-endian float32."""
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


B64_COLUMNS = {name: b64(values) for name, values in COLUMNS.items()}
NAN_COLUMN = [*COLUMNS["OT"][:5], float("nan"), *COLUMNS["OT"][6:]]
GAP = list(GOOD["timestamps"])
GAP[10] = "2017-01-01 12:00:00"  # 09:00 -> 12:00 -> 11:00: not regular


ENCODE_CASES = [
    # (request json or raw bytes, status, type, words the message must hold)
    (b'{"inputs": ["x"', 422, "invalid_request", ["malformed JSON"]),
    ({}, 422, "invalid_request", ["inputs", "required"]),
    ({"inputs": 12}, 422, "invalid_request", ["inputs"]),
    ({"inputs": ["x"], "normalize": "yes"}, 422, "invalid_request", ["normalize"]),
    ({"inputs": ["x"], "surprise": 1}, 422, "invalid_request", ["surprise"]),
    ({"inputs": []}, 422, "invalid_request", ["empty"]),
    ({"inputs": ["ok", "  "]}, 422, "invalid_request", ["input 1", "empty"]),
    ({"inputs": ["x"] * 65}, 422, "invalid_request", ["too many", "64"]),
    ({"inputs": ["word " * 100]}, 422, "invalid_request", ["input 0", "64 tokens", "truncate"]),
    ({"inputs": ["x"], "model": "nope"}, 404, "model_not_found", ["nope", TINY_TEXT]),
    ({"inputs": ["x"], "model": TINY_FORECAST}, 404, "model_not_found", [TINY_FORECAST]),
    ({"inputs": ["x"], "attention": "sparse"}, 422, "invalid_request", ["sparse", "performer"]),
    (
        {"inputs": ["x"], "attention": "performer", "attention_options": {"features": 8}},
        422,
        "invalid_request",
        ["features", "num_features"],
    ),
    (
        {"inputs": ["x"], "attention": "flash", "attention_options": {"padding": "ragged"}},
        422,
        "invalid_request",
        ["padding", "'mask', 'jagged'"],
    ),
    (
        {"inputs": ["x"], "attention": "flash", "attention_options": {"padding": "jagged"}},
        422,
        "invalid_request",
        ["CUDA", "padding='mask' on CPU"],
    ),
    (
        {"inputs": ["x"], "attention": "performer", "attention_options": {"num_features": 2}},
        422,
        "invalid_request",
        ["num_features", "[8, 4096]"],
    ),
]


@pytest.mark.parametrize(("request_body", "status", "type_", "needles"), ENCODE_CASES)
def test_encode_errors(
    client: TestClient, request_body: Any, status: int, type_: str, needles: list[str]
) -> None:
    if isinstance(request_body, bytes):
        r = client.post(
            "/encode", content=request_body, headers={"content-type": "application/json"}
        )
    else:
        r = client.post("/encode", json=request_body)
    assert_error(r, status, type_, *needles)


FORECAST_CASES = [
    ({"series": [GOOD]}, 422, "invalid_request", ["model"]),
    ({"series": "x"}, 422, "invalid_request", ["series"]),
    ({"series": []}, 422, "invalid_request", ["series", "empty"]),
    ({"series": [GOOD] * 65}, 422, "invalid_request", ["too many series"]),
    (
        {"series": [hourly_series(10)]},
        422,
        "invalid_request",
        ["series 0", "at least 24", "got 10"],
    ),
    (
        {"series": [series_with(values=[row[:6] for row in GOOD["values"]])]},
        422,
        "invalid_request",
        ["6 values", "7 values"],
    ),
    ({"series": [series_with(values=RAGGED)]}, 422, "invalid_request", ["row 3", "5 values"]),
    ({"series": [series_with(values=NAN_ROWS)]}, 422, "invalid_request", ["row 5", "finite"]),
    ({"series": [series_with(values=HUGE_ROWS)]}, 422, "invalid_request", ["row 7", "large"]),
    (
        {"series": [series_with(values=[["a"] * 7] * 24)]},
        422,
        "invalid_request",
        ["values"],
    ),
    ({"series": [series_with(timestamps=GAP)]}, 422, "invalid_request", ["regular"]),
    (
        {"series": [series_with(timestamps=["yesterday", *GOOD["timestamps"][1:]])]},
        422,
        "invalid_request",
        ["timestamp 0", "yesterday"],
    ),
    (
        {"series": [series_with(timestamps=GOOD["timestamps"][:-1])]},
        422,
        "invalid_request",
        ["23 timestamps", "24 value rows"],
    ),
    (
        {"series": [{"start": START, "columns": {**COLUMNS, "oil": COLUMNS["OT"]}}]},
        422,
        "invalid_request",
        ["series 0", "exactly this model's channels", "unknown 'oil'"],
    ),
    (
        {"series": [{"start": START, "columns": {k: v for k, v in COLUMNS.items() if k != "OT"}}]},
        422,
        "invalid_request",
        ["missing OT"],
    ),
    (
        {"series": [{"start": START, "columns": {**COLUMNS, "OT": COLUMNS["OT"][:-1]}}]},
        422,
        "invalid_request",
        ["same number of values", "HUFL has 24", "OT has 23"],
    ),
    (
        {"series": [{"start": START, "columns": COLUMNS, "values": GOOD["values"]}]},
        422,
        "invalid_request",
        ["either 'values' (rows) or 'columns'"],
    ),
    (
        {"series": [{"columns": COLUMNS}]},
        422,
        "invalid_request",
        ["'timestamps'", "'start'"],
    ),
    (
        {"series": [{"start": "2017-01-01 00:30:00", "columns": COLUMNS}]},
        422,
        "invalid_request",
        ["start '2017-01-01 00:30:00'", "on the hour"],
    ),
    (
        {"series": [{"start": "soon", "columns": COLUMNS}]},
        422,
        "invalid_request",
        ["start 'soon'", "not a date-time"],
    ),
    (
        {"series": [{"start": START, "columns": {**B64_COLUMNS, "OT": "not base64!"}}]},
        422,
        "invalid_request",
        ["columns.OT", "base64", "little-endian float32"],
    ),
    (
        {"series": [{"start": START, "columns": {**B64_COLUMNS, "OT": "AAAAAAAAAAAAAA=="}}]},
        422,
        "invalid_request",
        ["columns.OT", "10 bytes", "whole number of float32"],
    ),
    (
        {"series": [{"start": START, "columns": {**B64_COLUMNS, "OT": b64(NAN_COLUMN)}}]},
        422,
        "invalid_request",
        ["row 5, channel OT", "finite"],
    ),
    (
        {"series": [{"start": START, "columns": {**B64_COLUMNS, "OT": b64(COLUMNS["OT"][:-1])}}]},
        422,
        "invalid_request",
        ["same number of values", "OT has 23"],
    ),
    ({"series": [GOOD], "horizon": 9}, 422, "invalid_request", ["horizon", "between 1 and 8"]),
    ({"series": [GOOD], "horizon": 0}, 422, "invalid_request", ["horizon"]),
    ({"series": [GOOD], "model": "informer-etth1-h999"}, 404, "model_not_found", ["h999"]),
    ({"series": [GOOD], "attention": "linear"}, 422, "invalid_request", ["valid backends"]),
    (
        {"series": [GOOD], "attention": "probsparse", "attention_options": {"factor": 0}},
        422,
        "invalid_request",
        ["factor", "[1, 100]"],
    ),
]


@pytest.mark.parametrize(("overrides", "status", "type_", "needles"), FORECAST_CASES)
def test_forecast_errors(
    client: TestClient, overrides: dict[str, Any], status: int, type_: str, needles: list[str]
) -> None:
    body = forecast_body(**overrides)
    if "model" not in overrides and overrides.get("series") == [GOOD] and len(overrides) == 1:
        body.pop("model")  # the "missing model" case
    r = client.post(
        "/forecast", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert_error(r, status, type_, *needles)


def test_embeddings_errors(client: TestClient) -> None:
    assert_error(
        client.post("/v1/embeddings", json={"input": "x"}), 422, "invalid_request", "model"
    )
    assert_error(
        client.post(
            "/v1/embeddings", json={"input": "x", "model": TINY_TEXT, "encoding_format": "int8"}
        ),
        422,
        "invalid_request",
        "encoding_format",
    )
    assert_error(
        client.post("/v1/embeddings", json={"input": "x", "model": TINY_TEXT, "dimensions": 33}),
        422,
        "invalid_request",
        "dimensions must be between 1 and 32",
    )


def test_backend_that_cannot_run_this_model_is_a_422_with_the_reason() -> None:
    # One head of width 264: over flash's 256 limit, so this model cannot use flash at all.
    wide = text_servable(hidden=264, heads=1)
    with TestClient(make_app([wide])) as c:
        r = c.post("/encode", json={"inputs": ["x"], "attention": "flash"})
        assert_error(r, 422, "invalid_request", "flash", "head dimensions up to 256")
        assert c.post("/encode", json={"inputs": ["x"], "attention": "full"}).status_code == 200
        card = c.get("/models").json()["data"][0]
        assert "flash" in card["unavailable_backends"] and "flash" not in card["served_backends"]


def test_body_over_the_limit_is_413(text_double: Wrapped) -> None:
    with TestClient(make_app([text_double], max_body_bytes=2048)) as c:
        big = {"inputs": ["word " * 1000]}
        assert_error(c.post("/encode", json=big), 413, "body_too_large", "2048 bytes")

        def chunks() -> Any:  # no Content-Length: the limit applies while streaming
            yield b'{"inputs": ["'
            for _ in range(100):
                yield b"word " * 10
            yield b'"]}'

        r = c.post("/encode", content=chunks(), headers={"content-type": "application/json"})
        assert_error(r, 413, "body_too_large")


def test_unknown_route_and_method(client: TestClient) -> None:
    assert_error(client.get("/nowhere"), 404, "not_found")
    assert_error(client.get("/encode"), 405, "method_not_allowed")


def test_unexpected_error_is_a_500_without_internals(text_double: Wrapped) -> None:
    def boom(rows: list[Any]) -> None:
        raise RuntimeError("secret internal detail /srv/weights")

    text_double.fail = boom
    with TestClient(make_app([text_double])) as c:
        text_double.recording = True
        body = assert_error(c.post("/encode", json={"inputs": ["x"]}), 500, "internal_error")
        assert "secret" not in json.dumps(body)


@pytest.mark.parametrize("error", [RuntimeError, ValueError, KeyError])
def test_every_500_is_logged_once_with_the_request_id_and_traceback(
    text_double: Wrapped, caplog: pytest.LogCaptureFixture, error: type[Exception]
) -> None:
    # A plain ValueError from inside the model is ours, not the caller's: a 500, and logged.
    def boom(rows: list[Any]) -> None:
        raise error("broken inside the model")

    text_double.fail = boom
    with TestClient(make_app([text_double])) as c:
        text_double.recording = True
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            r = c.post("/encode", json={"inputs": ["x"]}, headers={"x-request-id": "req-42"})
        assert_error(r, 500, "internal_error")
    logged = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(logged) == 1
    assert "req-42" in logged[0].getMessage()
    assert logged[0].exc_info is not None and logged[0].exc_info[0] is error


def test_bad_requests_do_not_harm_the_batch_beside_them(
    client: TestClient, text_double: Wrapped
) -> None:
    # A first request holds the worker (gated, not slowed: a busy machine cannot reorder this);
    # the bad ones are refused while it runs, and the two good ones behind it share one batch.
    worker = client.app.state.attnserve.batcher.workers[TINY_TEXT]  # type: ignore[attr-defined]
    text_double.gate = threading.Event()
    runs = len(text_double.batches)
    goods = [{"inputs": ["a good text"]}, {"inputs": ["another good text, a little longer"]}]
    bad = [
        {"inputs": ["word " * 100]},
        {"inputs": ["x"], "attention": "nope"},
        {"inputs": []},
    ]
    with ThreadPoolExecutor(len(bad) + len(goods) + 1) as pool:
        blocker = pool.submit(client.post, "/encode", json={"inputs": ["first"]})
        wait_until(lambda: len(text_double.batches) == runs + 1)
        refused = [pool.submit(client.post, "/encode", json=b) for b in bad]
        answered = [pool.submit(client.post, "/encode", json=b) for b in goods]
        statuses = [f.result(timeout=10).status_code for f in refused]  # before the gate opens
        wait_until(lambda: worker.depth == len(goods))
        text_double.gate.set()
        responses = [f.result(timeout=10) for f in answered]
    text_double.gate = None
    assert blocker.result().status_code == 200
    assert statuses == [422, 422, 422]
    assert [r.status_code for r in responses] == [200, 200]
    assert [r.headers["x-batch-requests"] for r in responses] == ["2", "2"]
    assert text_double.batches[runs:] == [1, 2]  # the first, then both good ones together
    for body, r in zip(goods, responses, strict=True):
        alone = client.post("/encode", json=body).json()["embeddings"][0]
        got = r.json()["embeddings"][0]
        assert max(abs(a - b) for a, b in zip(got, alone, strict=True)) < 1e-5


APPROXIMATIONS = [b for b in BACKENDS if get_backend(b).budget is not None]


@pytest.mark.parametrize("backend", APPROXIMATIONS)
@pytest.mark.parametrize("route", ["/encode", "/forecast"])
def test_a_budget_out_of_range_names_the_option_and_its_range(
    client: TestClient, backend: str, route: str
) -> None:
    """Every approximation's budget option (block size, bucket size, landmarks, ...) one past
    its maximum: a 422 naming the option and its range, on a text model and a forecaster."""
    name = get_backend(backend).budget
    assert name is not None
    spec = get_backend(backend).options[name].describe()
    options = {"attention": backend, "attention_options": {name: spec["maximum"] + 1}}
    body = {"inputs": ["x"], **options} if route == "/encode" else forecast_body(**options)
    r = client.post(route, json=body)
    assert_error(r, 422, "invalid_request", name, f"[{spec['minimum']}, {spec['maximum']}]")
