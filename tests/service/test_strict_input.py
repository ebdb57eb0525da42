"""Strict input (issue 15): every malformed body is a 422 with the error body, text that is not
Unicode is a 422 naming the input, numbers as strings are refused, and with an API key set an
unauthenticated request is refused before its body is read."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from models.training.data.ett import ETTH1_CHANNELS
from tests.service.helpers import TINY_FORECAST, Wrapped, assert_error, hourly_series, make_app

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"[" * 10_000, "recursion limit"),  # deep nesting: was a 400 "error parsing the body"
        (b'{"inputs": ["caf\xe9"]}', "line 1"),  # Latin-1, not UTF-8
        ('{"inputs": ["x"]}'.encode("utf-16"), "byte-order mark"),
        (b'\xef\xbb\xbf{"inputs": ["x"]}', "byte-order mark"),  # UTF-8 with a BOM
        (b'{"inputs": ["x"]', "EOF"),
    ],
    ids=["deep", "latin-1", "utf-16", "bom", "truncated"],
)
def test_every_malformed_body_is_a_422(client: TestClient, body: bytes, needle: str) -> None:
    r = client.post("/encode", content=body, headers=JSON)
    assert_error(r, 422, "invalid_request", "malformed JSON", needle)
    assert client.post("/encode", json={"inputs": ["still serving"]}).status_code == 200


def test_a_compressed_body_is_a_422_that_names_the_encoding(client: TestClient) -> None:
    body = gzip.compress(json.dumps({"inputs": ["x"]}).encode())
    r = client.post("/encode", content=body, headers=JSON | {"content-encoding": "gzip"})
    assert_error(r, 422, "invalid_request", "Content-Encoding 'gzip'", "uncompressed")


@pytest.mark.parametrize("path", ["/encode", "/v1/embeddings"])
def test_an_unpaired_surrogate_is_a_422_naming_the_input(client: TestClient, path: str) -> None:
    # Valid JSON (a lone trailing-surrogate escape), but not Unicode text: it used to reach the
    # tokenizer and come back as a 500 with a traceback in the log.
    field = "inputs" if path == "/encode" else "input"
    body = '{"' + field + '": ["fine", "bad \\udc00 text"], "model": "tiny-minilm"}'
    r = client.post(path, content=body.encode(), headers=JSON)
    assert_error(r, 422, "invalid_request", "input 1", "surrogate")


@pytest.mark.parametrize("path", ["/encode", "/"])
def test_a_text_of_nothing_but_a_surrogate_is_a_422(client: TestClient, path: str) -> None:
    # No letter to glance at, so the server asks the tokenizer whether it holds any token; that
    # question must not be asked of text that is not Unicode (it used to be a 500).
    body = '{"inputs": "\\ud800", "model": "tiny-minilm", "attention": "auto"}'
    r = client.post(path, content=body.encode(), headers=JSON)
    assert_error(r, 422, "invalid_request", "surrogate")


@pytest.mark.parametrize(
    "overrides",
    [{"horizon": "3"}, {"series": [{**hourly_series(24), "values": [["1.5"] * 7] * 24}]}],
    ids=["horizon", "values"],
)
def test_numbers_as_strings_are_refused(client: TestClient, overrides: dict) -> None:
    body = {"model": TINY_FORECAST, "series": [hourly_series(24)], **overrides}
    assert_error(client.post("/forecast", json=body), 422, "invalid_request", "valid")


def test_the_key_is_checked_before_the_body_is_read(text_double: Wrapped) -> None:
    with TestClient(make_app([text_double], api_key="s3cret")) as c:
        # Malformed, unauthenticated: 401 (was 422: the body was parsed first).
        r = c.post("/encode", content=b"{not json", headers=JSON)
        assert_error(r, 401, "unauthorized", "Bearer")
        assert r.headers["www-authenticate"] == "Bearer"
        # Over the size limit, unauthenticated: 401 too (nothing is buffered for it).
        big = b'{"inputs": ["' + b"x" * (5 << 20) + b'"]}'
        assert_error(c.post("/encode", content=big, headers=JSON), 401, "unauthorized")
        assert_error(c.get("/models"), 401, "unauthorized")
        auth = {"authorization": "Bearer s3cret"}
        assert c.post("/encode", content=b"{not json", headers=JSON | auth).status_code == 422
        assert c.post("/encode", json={"inputs": ["x"]}, headers=auth).status_code == 200
        # Health, readiness and metrics stay open.
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200
        assert c.get("/metrics").status_code == 200


@pytest.mark.parametrize("value", ["1.5", True, None], ids=["string", "bool", "null"])
def test_every_history_value_is_a_json_number(client: TestClient, value: Any) -> None:
    rows = hourly_series(24)
    for layout in ("values", "columns"):
        series: dict[str, Any] = {"timestamps": rows["timestamps"]}
        if layout == "values":
            series["values"] = [[value] * 7, *rows["values"][1:]]
        else:
            columns = {c: [r[j] for r in rows["values"]] for j, c in enumerate(ETTH1_CHANNELS)}
            columns["OT"] = [value, *columns["OT"][1:]]
            series["columns"] = columns
        body = {"model": TINY_FORECAST, "series": [series]}
        assert_error(client.post("/forecast", json=body), 422, "invalid_request", layout)
