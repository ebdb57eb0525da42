"""The HTTP contract, in process: /encode, /v1/embeddings, /forecast, /models, health, docs."""

from __future__ import annotations

import base64
import math
import re
from array import array

from fastapi.testclient import TestClient

from models.attention import BACKENDS
from tests.service.helpers import TINY_FORECAST, TINY_TEXT, hourly_series

TIMING_HEADERS = ("x-request-id", "x-queue-time-ms", "x-inference-time-ms", "x-batch-size")


def test_encode_returns_one_unit_vector_per_text(client: TestClient) -> None:
    r = client.post("/encode", json={"inputs": ["first text", "a second, longer text"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == TINY_TEXT and body["attention"] == "flash"
    assert len(body["embeddings"]) == 2 and len(body["embeddings"][0]) == 32
    for vector in body["embeddings"]:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    # [CLS] first text [SEP] + [CLS] a second , longer text [SEP]: padding is not counted.
    assert body["usage"]["tokens"] == 4 + 7
    for header in TIMING_HEADERS:
        assert header in r.headers
    assert r.headers["x-batch-size"] == "2"


def test_encode_single_string_backend_and_no_normalize(client: TestClient) -> None:
    r = client.post(
        "/encode",
        json={
            "inputs": "just one",
            "model": TINY_TEXT,
            "attention": "nystrom",
            "attention_options": {"num_landmarks": 4},
            "normalize": False,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["attention"] == "nystrom" and len(body["embeddings"]) == 1
    raw = body["embeddings"][0]
    norm = math.sqrt(sum(x * x for x in raw))
    assert not math.isclose(norm, 1.0, rel_tol=1e-3)
    # Not normalising changes the length only: the direction is the normalised answer's.
    unit = client.post(
        "/encode",
        json={
            "inputs": "just one",
            "attention": "nystrom",
            "attention_options": {"num_landmarks": 4},
        },
    ).json()["embeddings"][0]
    assert max(abs(x / norm - u) for x, u in zip(raw, unit, strict=True)) < 1e-6


def test_exact_backends_agree(client: TestClient) -> None:
    texts = ["the same text", "and another one that is longer than the first"]
    full = client.post("/encode", json={"inputs": texts, "attention": "full"}).json()
    flash = client.post("/encode", json={"inputs": texts, "attention": "flash"}).json()
    for a, b in zip(full["embeddings"], flash["embeddings"], strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_truncate_cuts_long_texts(client: TestClient) -> None:
    long_text = "word " * 200  # over the tiny encoder's 64 tokens
    r = client.post("/encode", json={"inputs": [long_text], "truncate": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["tokens"] == 64


def test_openai_embeddings_float_and_base64(client: TestClient) -> None:
    request = {"input": ["hello there", "general kenobi"], "model": TINY_TEXT}
    floats = client.post("/v1/embeddings", json=request)
    assert floats.status_code == 200, floats.text
    body = floats.json()
    assert body["object"] == "list" and body["model"] == TINY_TEXT
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" for d in body["data"])
    # [CLS] hello there [SEP] + [CLS] general ken ##ob ##i [SEP]
    assert body["usage"] == {"prompt_tokens": 4 + 6, "total_tokens": 4 + 6}
    encoded = client.post("/v1/embeddings", json={**request, "encoding_format": "base64"}).json()
    for f, b in zip(body["data"], encoded["data"], strict=True):
        decoded = array("f", base64.b64decode(b["embedding"]))
        assert len(decoded) == len(f["embedding"])
        assert max(abs(x - y) for x, y in zip(decoded, f["embedding"], strict=True)) < 1e-6


def test_openai_embeddings_accepts_hub_alias_only_for_aliases(client: TestClient) -> None:
    r = client.post("/v1/embeddings", json={"input": "x", "model": "text-embedding-3-small"})
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "model_not_found"


def test_forecast_returns_future_timestamps_and_cuts_horizon(client: TestClient) -> None:
    series = hourly_series(30, start="2017-03-01 00:00:00")
    r = client.post(
        "/forecast",
        json={"model": TINY_FORECAST, "series": [series, hourly_series(24, seed=1)], "horizon": 5},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["attention"] == "probsparse" and body["horizon"] == 5
    first = body["forecasts"][0]
    assert first["timestamps"][0] == "2017-03-02 06:00:00"  # one hour after the last of 30 rows
    assert len(first["timestamps"]) == 5 and len(first["values"]) == 5
    assert all(len(row) == 7 and all(math.isfinite(v) for v in row) for row in first["values"])
    assert r.headers["x-batch-size"] == "2"
    second = body["forecasts"][1]  # 24 rows from 2017-01-01 00:00
    assert second["timestamps"] == [f"2017-01-02 0{h}:00:00" for h in range(5)]
    # A shorter horizon cuts the model's forecast: the first 5 of the 8 steps it makes. Each
    # alone, so both run the same batch (batched with another series, ProbSparse's top queries
    # can change with float noise).
    request = {"model": TINY_FORECAST, "series": [series]}
    cut = client.post("/forecast", json={**request, "horizon": 5}).json()["forecasts"][0]
    whole = client.post("/forecast", json=request).json()
    assert whole["horizon"] == 8 and cut["values"] == whole["forecasts"][0]["values"][:5]
    assert cut["timestamps"] == whole["forecasts"][0]["timestamps"][:5] == first["timestamps"]


def test_forecast_columns_and_start_give_the_same_forecast_as_rows(client: TestClient) -> None:
    rows = hourly_series(30, start="2017-03-01 00:00:00", seed=3)
    cards = client.get("/models").json()["data"]
    channels = next(c for c in cards if c["name"] == TINY_FORECAST)["channels"]
    columnar = {
        "start": rows["timestamps"][0],
        "columns": {c: [r[i] for r in rows["values"]] for i, c in enumerate(channels)},
    }
    mixed = {"timestamps": rows["timestamps"], "columns": columnar["columns"]}
    got = [
        client.post("/forecast", json={"model": TINY_FORECAST, "series": [s]})
        for s in (rows, columnar, mixed)
    ]
    assert all(r.status_code == 200 for r in got), [r.text for r in got]
    first = got[0].json()["forecasts"][0]
    assert first["timestamps"][0] == "2017-03-02 06:00:00"
    for r in got[1:]:
        assert r.json()["forecasts"][0] == first


def test_forecast_base64_columns_give_the_forecast_of_the_same_numbers(client: TestClient) -> None:
    rows = hourly_series(30, start="2017-03-01 00:00:00", seed=4)
    cards = client.get("/models").json()["data"]
    channels = next(c for c in cards if c["name"] == TINY_FORECAST)["channels"]
    float32 = [array("f", [r[i] for r in rows["values"]]) for i in range(len(channels))]
    as_numbers = {c: list(col) for c, col in zip(channels, float32, strict=True)}
    as_base64 = {
        c: base64.b64encode(col.tobytes()).decode()
        for c, col in zip(channels, float32, strict=True)
    }
    assert array("f").itemsize == 4 and array("f", [1.0]).tobytes() == b"\x00\x00\x80?"  # LE
    mixed = {**as_numbers, channels[0]: as_base64[channels[0]]}
    got = [
        client.post(
            "/forecast",
            json={
                "model": TINY_FORECAST,
                "series": [{"start": rows["timestamps"][0], "columns": c}],
            },
        )
        for c in (as_numbers, as_base64, mixed)
    ]
    assert all(r.status_code == 200 for r in got), [r.text for r in got]
    first = got[0].json()["forecasts"][0]
    assert got[1].json()["forecasts"][0] == first and got[2].json()["forecasts"][0] == first
    # The bytes are the numbers: a different column gives a different forecast.
    changed = {**as_base64, channels[0]: as_base64[channels[1]]}
    other = client.post(
        "/forecast",
        json={
            "model": TINY_FORECAST,
            "series": [{"start": rows["timestamps"][0], "columns": changed}],
        },
    )
    assert other.status_code == 200 and other.json()["forecasts"][0] != first


def test_forecast_default_horizon_and_every_backend(client: TestClient) -> None:
    values = {}
    for backend in ("full", "flash", "probsparse", "performer", "nystrom"):
        r = client.post(
            "/forecast",
            json={"model": TINY_FORECAST, "series": [hourly_series(24)], "attention": backend},
        )
        assert r.status_code == 200, (backend, r.text)
        assert r.json()["attention"] == backend
        assert r.json()["horizon"] == 8 and len(r.json()["forecasts"][0]["values"]) == 8
        values[backend] = [v for row in r.json()["forecasts"][0]["values"] for v in row]
    # The two exact backends agree; each approximation is a forecast of its own (so the
    # backend named is the one that ran).
    assert max(abs(a - b) for a, b in zip(values["full"], values["flash"], strict=True)) < 1e-4
    for backend in ("probsparse", "performer", "nystrom"):
        assert values[backend] != values["full"], backend


def test_models_lists_cards_with_limits_and_backends(client: TestClient) -> None:
    r = client.get("/models")
    assert r.status_code == 200
    cards = {c["name"]: c for c in r.json()["data"]}
    assert set(cards) == {TINY_TEXT, TINY_FORECAST}
    forecast = cards[TINY_FORECAST]
    assert forecast["context"] == 24 and forecast["horizon"] == 8 and forecast["freq"] == "h"
    assert len(forecast["channels"]) == 7
    assert forecast["default_attention"] == "probsparse"
    # every backend serves a forecaster: a layer one cannot run falls back to exact attention
    assert forecast["served_backends"] == list(BACKENDS)
    assert "factor" in forecast["backends"]["probsparse"]["options"]
    text = cards[TINY_TEXT]
    assert text["max_tokens"] == 64 and text["default_attention"] == "flash"
    assert text["limits"]["max_inputs_per_request"] == 64
    assert client.get(f"/models/{TINY_FORECAST}").json()["name"] == TINY_FORECAST
    assert client.get("/models/nope").status_code == 404


def test_health_ready_docs_and_request_id(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").json()["status"] == "ready"
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/encode", "/v1/embeddings", "/forecast", "/models", "/readyz"} <= set(paths)
    r = client.get("/healthz", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    odd = client.get("/healthz", headers={"x-request-id": "bad id with spaces"})
    other = client.get("/healthz", headers={"x-request-id": "bad id with spaces"})
    # Refused, and replaced by a fresh id of the server's own per request.
    new_ids = (odd.headers["x-request-id"], other.headers["x-request-id"])
    assert all(re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]{8}", i) for i in new_ids), new_ids
    assert new_ids[0] != new_ids[1]
