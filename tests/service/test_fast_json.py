"""The pydantic-core body reader parses exactly what the standard library would."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Body, FastAPI, Request
from fastapi.testclient import TestClient

from service.http.routes.fast_json import FastJSONRequest, FastJSONRoute


@pytest.fixture(scope="module")
def client() -> TestClient:
    router = APIRouter(route_class=FastJSONRoute)

    @router.post("/echo")
    async def echo(request: Request, body: Annotated[Any, Body()]) -> dict[str, Any]:
        # repr: comparable for NaN and lone surrogates, which JSON responses cannot carry
        return {"reader": type(request).__name__, "body": repr(body)}

    app = FastAPI()
    app.include_router(router)
    return TestClient(app)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"values": [[1.5, -2e-3, 123456789012345678901234567890]], "s": "caf\\u00e9"}',
        b'  ["a", {"b": null, "c": true}]  ',
        b'{"a": 1, "a": 2}',  # duplicate keys: the last wins, as in json.loads
        b'{"text": "\\ud800"}',  # an unpaired surrogate: pydantic-core refuses, json.loads takes it
        b'{"text": "\\udc00 after"}',  # an unpaired trailing surrogate: pydantic-core takes it
        b'{"x": NaN}',
    ],
)
def test_bodies_parse_as_the_standard_library_does(client: TestClient, raw: bytes) -> None:
    r = client.post("/echo", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.json()["reader"] == FastJSONRequest.__name__
    assert r.json()["body"] == repr(json.loads(raw))


def test_malformed_body_keeps_fastapis_json_error(client: TestClient) -> None:
    r = client.post("/echo", content=b'{"a": [1, 2', headers={"content-type": "application/json"})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["type"] == "json_invalid" and detail["loc"] == ["body", 11]
