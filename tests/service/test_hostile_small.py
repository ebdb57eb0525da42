"""Small hostile inputs (issue 50, item 5): an empty attention name, a forecast past the largest
date, texts that tokenize to nothing, and the wording of the refusals they meet, on every route
that takes them (the routes are read from the app's own OpenAPI schema, so a route added later is
covered as it lands), against one model of every task."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from service.engine.batching.admission import compute_refusal
from service.engine.batching.policy import BatchKey
from tests.service.helpers import assert_error, folders_client, hourly_series
from tests.utils.edge_requests import EMPTY_TOKENS, FORECASTER, body_variants
from tests.utils.informer import tiny_checkpoint
from tests.utils.tiny_sparse import save_tiny_splade

DOCS = Path(__file__).resolve().parents[2] / "docs"
TEXT = "hello world"


@pytest.fixture(scope="module")
def served(drop_in_paths: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A client of a server with an encoder, a reranker, a classifier, a forecaster and a
    sparse (SPLADE) encoder."""
    forecaster = tiny_checkpoint(tmp_path_factory.mktemp("forecaster") / FORECASTER)
    splade = save_tiny_splade(tmp_path_factory.mktemp("sparse") / "tiny-splade", layers=1)
    with folders_client([*drop_in_paths, forecaster, splade]) as client:
        yield client


def cards(client: TestClient) -> list[dict[str, Any]]:
    return client.get("/models").json()["data"]


def text_fields(fields: set[str], text: str) -> dict[str, Any]:
    """The text-carrying fields of a body with fields ``fields``, each holding ``text``."""
    if "parameters" in fields and "inputs" in fields:  # /similarity's shape
        return {"inputs": {"source_sentence": text, "sentences": [text]}}
    values = {
        "inputs": [text],
        "input": [text],
        "texts": [text],
        "query": text,
        "queries": text,  # vLLM's /score: one query against the documents
        "documents": [text],
    }
    return {k: v for k, v in values.items() if k in fields}


def bodies_with(client: TestClient, field: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, a valid body) for every body shape of every POST route whose body takes ``field``,
    read from the app's OpenAPI schema."""
    openapi = client.get("/openapi.json").json()
    loaded = cards(client)
    context = next(c["context"] for c in loaded if c["task"] == "forecast")
    found = []
    for path, operations in openapi["paths"].items():
        if "post" not in operations:
            continue
        serving = [c["name"] for c in loaded if path in c.get("routes", ())]
        for fields in body_variants(openapi, path):
            if field not in fields:
                continue
            if "series" in fields:
                body = {"series": [hourly_series(context)]}
            else:
                body = text_fields(fields, TEXT)
            if "model" in fields:  # the first model that takes this shape (TEI's / takes four)
                named = [{**body, "model": name} for name in serving]
                body = next((b for b in named if client.post(path, json=b).is_success), body)
            found.append((path, body))
    return found


def test_every_route_taking_attention_is_found(served: TestClient) -> None:
    paths = {path for path, _ in bodies_with(served, "attention")}
    assert len(paths) >= 17 and {"/encode", "/forecast", "/similarity", "/v2/rerank"} <= paths


def test_an_empty_attention_name_is_a_422_on_every_route(served: TestClient) -> None:
    """Issue 50 item 5.1: ``"attention": ""`` is not the default backend but a 422 that names
    the field and the valid backends."""
    for path, body in bodies_with(served, "attention"):
        assert served.post(path, json=body).status_code == 200, (path, body)
        r = served.post(path, json={**body, "attention": ""})
        assert_error(r, 422, "invalid_request", "attention", "auto", "full")


def forecast_ending(client: TestClient, last: str, **extra: Any) -> Any:
    context = next(c["context"] for c in cards(client) if c["task"] == "forecast")
    series = hourly_series(context)
    stamps = pd.date_range(end=pd.Timestamp(last), periods=context, freq="h")
    series["timestamps"] = [t.strftime("%Y-%m-%d %H:%M:%S") for t in stamps]
    return client.post("/forecast", json={"model": FORECASTER, "series": [series], **extra})


def test_a_forecast_past_the_largest_date_is_a_422(served: TestClient) -> None:
    """Issue 50 item 5.2: a history ending at 9999-12-31 23:00 has no future timestamps."""
    r = forecast_ending(served, "9999-12-31 23:00:00")
    assert_error(r, 422, "invalid_request", "series 0", "9999-12-31 23:59:59", "horizon")
    # One step fits; the horizon that fits is what the message offers.
    ok = forecast_ending(served, "9999-12-31 22:00:00", horizon=1)
    assert ok.status_code == 200, ok.text
    assert ok.json()["forecasts"][0]["timestamps"] == ["9999-12-31 23:00:00"]
    r = forecast_ending(served, "9999-12-31 22:00:00", horizon=2)
    assert_error(r, 422, "invalid_request", "horizon of at most 1")


# Long texts of characters tokenizers drop: judged off the event loop, refused all the same.
LONG_TOKENLESS = ["\u200b" * 5000, "\x00\n" * 3000]


@pytest.mark.parametrize(
    "text", [*EMPTY_TOKENS, "\ufeff", "\u200f\u200e", "\ue000", "\x07", *LONG_TOKENLESS]
)
def test_a_text_with_no_tokens_is_a_422_on_every_text_route(served: TestClient, text: str) -> None:
    """Issue 50 item 5.5: a text whose own tokens are none (after the tokenizer's normalizer)
    is refused as "" is, on every route that takes texts."""
    for path, body in bodies_with(served, "attention"):
        if "series" in body:
            continue
        shape = set(body) | ({"parameters"} if isinstance(body.get("inputs"), dict) else set())
        fields = text_fields(shape, text)
        r = served.post(path, json={**body, **fields})
        assert_error(r, 422, "invalid_request", "no tokens")


def test_a_long_text_with_a_token_after_dropped_characters_is_served(served: TestClient) -> None:
    """The event loop looks at a text's first characters only; the rest is judged in a thread,
    where one letter after thousands of dropped characters is a token."""
    r = served.post("/encode", json={"inputs": ["\u200b" * 5000 + "a"], "truncate": True})
    assert r.status_code == 200, r.text


def test_plural_of_series_in_a_compute_refusal() -> None:
    """Issue 50 item 5.6: "send at most 37 series", not "seriess"."""
    call = SimpleNamespace(backend="full", options=())
    servable = SimpleNamespace(
        task="forecast", name="f", default_call=lambda b: call, backends=lambda: ["full"]
    )
    refusal = compute_refusal(
        servable,  # type: ignore[arg-type]
        BatchKey(call, 24),  # type: ignore[arg-type]
        64,
        24,
        1.0,
        lambda key, rows, length: rows / 37,
    )
    message = str(refusal)
    assert "seriess" not in message and "send at most 37 series " in message, message
    assert "64 series of up to" in message, message


def test_no_reranker_loaded_says_how_to_load_one(client: TestClient) -> None:
    """Issue 50 item 5.6: not "this server has 0 rerank models (none)"."""
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
    body = assert_error(r, 404, "model_not_found", "no rerank model is loaded", "--models")
    assert "0 rerank models" not in body["error"]["message"]


def test_similarity_counts_the_sentences_sent(served: TestClient) -> None:
    """Issue 50 item 5.6: 64 sentences are not "too many inputs: 65"."""
    body = {"inputs": {"source_sentence": "a", "sentences": ["b"] * 64}}
    r = served.post("/similarity", json=body)
    message = assert_error(r, 422, "invalid_request", "sentences: 64", "63")["error"]["message"]
    assert "65" not in message.split(";")[0], message
    body["inputs"]["sentences"] = ["b"] * 63
    assert served.post("/similarity", json=body).status_code == 200


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_a_blank_query_is_named_as_the_query(served: TestClient, path: str) -> None:
    """Issue 50 item 5.6: not "document 0 is empty"."""
    body: dict[str, Any] = {"model": "tiny-reranker", "query": "  ", "documents": ["a"]}
    if path == "/rerank":
        body = {"model": "tiny-reranker", "query": "  ", "texts": ["a"]}
    r = served.post(path, json=body)
    message = assert_error(r, 422, "invalid_request", "query")["error"]["message"]
    assert "document 0" not in message, message


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_json_under_another_content_type_says_which_to_send(
    served: TestClient, content_type: str | None
) -> None:
    """Issue 50 item 5.6: valid JSON without ``Content-Type: application/json`` is told so."""
    headers = {"content-type": content_type} if content_type else {}
    r = served.post("/encode", content=json.dumps({"inputs": [TEXT]}), headers=headers)
    message = assert_error(r, 422, "invalid_request", "Content-Type: application/json")
    assert "valid dictionary" not in message["error"]["message"]


def doc_examples(page: Path) -> list[tuple[str, dict[str, Any]]]:
    """(path, body) of every ``curl -s localhost:8000<path> ... -d '<json>'`` in a docs page."""
    text = page.read_text()
    found = []
    for match in re.finditer(
        r"curl -s localhost:8000(/\S*)(?:(?!curl ).)*?-d '(\{.*?\})'", text, re.S
    ):
        found.append((match.group(1), json.loads(match.group(2))))
    return found


def test_the_rerank_classify_page_examples_run(served: TestClient) -> None:
    """Issue 50 item 5.7: every request body of docs/models/rerank-classify.md is taken (its
    model names mapped to the test server's)."""
    names = {"my-reranker": "tiny-reranker", "my-sentiment": "tiny-classifier"}
    examples = doc_examples(DOCS / "models" / "rerank-classify.md")
    assert len(examples) >= 5
    for path, body in examples:
        body = {**body, "model": names.get(body.get("model"), body.get("model"))}
        r = served.post(path, json=body)
        assert r.status_code == 200, (path, body, r.text)


def test_similarity_takes_max_quality_loss_with_auto(served: TestClient) -> None:
    """Issue 50 item 5.7: docs/compatibility.md says every model route takes max_quality_loss."""
    body = {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "attention": "auto"}
    r = served.post("/similarity", json={**body, "max_quality_loss": 0.1})
    assert r.status_code == 200, r.text


def test_forecast_refuses_jagged_padding_on_cpu_as_encode_does(served: TestClient) -> None:
    """Issue 50 item 5.7: the documented CPU 422 for flash's padding='jagged' on /forecast too."""
    options = {"attention": "flash", "attention_options": {"padding": "jagged"}}
    encode = served.post("/encode", json={"inputs": [TEXT], **options})
    assert_error(encode, 422, "invalid_request", "padding='jagged'")
    r = forecast_ending(served, "2017-01-03 00:00:00", **options)
    assert_error(r, 422, "invalid_request", "padding='jagged'", "padding='mask'")
