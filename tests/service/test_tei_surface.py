"""text-embeddings-inference's surface beyond /embed, /rerank and /predict (issue 43): ``POST /``
and ``/invocations`` by the model's task, ``/similarity``, ``/embed_all`` (against
sentence-transformers' token embeddings), ``/tokenize`` and ``/decode`` (against the folder's
own tokenizer through transformers), ``GET /info`` with TEI's fields, and the public probes
``/health``, ``/ping`` and ``GET /``. Models are named by the ``model`` field or the ``x-model``
header, else the first loaded text model answers; errors are 4xx with this server's body."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import assert_error, folders_client, make_app, post_all
from tests.utils.informer import tiny_checkpoint
from tests.utils.live_server import (
    DROP_IN_CLASSIFIER,
    DROP_IN_ENCODER,
    DROP_IN_RERANKER,
    drop_in_folders,
)

ENCODER, RERANKER, CLASSIFIER = DROP_IN_ENCODER, DROP_IN_RERANKER, DROP_IN_CLASSIFIER
TEXTS = ["the first text", "a second, somewhat longer text about something else", "x"]
# The fields of TEI's Info (router/src/lib.rs), in its order.
INFO_FIELDS = [
    "model_id",
    "model_sha",
    "model_dtype",
    "served_model_name",
    "model_type",
    "max_concurrent_requests",
    "max_input_length",
    "max_batch_tokens",
    "max_batch_requests",
    "max_client_batch_size",
    "auto_truncate",
    "tokenization_workers",
    "version",
    "sha",
    "docker_label",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The drop-in folders (encoder with query/document prompts, reranker, 3-label classifier)
    and a tiny forecaster, by name."""
    root = tmp_path_factory.mktemp("tei-surface")
    found = {p.name: p for p in drop_in_folders(root)}
    found["forecaster"] = tiny_checkpoint(root / "forecaster")
    return found


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]) -> Iterator[TestClient]:
    """Encoder first (the default model), then reranker, classifier and a forecaster."""
    names = [ENCODER, RERANKER, CLASSIFIER, "forecaster"]
    with folders_client(folders[n] for n in names) as c:
        yield c


@pytest.fixture(scope="module")
def forecaster_first(folders: dict[str, Path]) -> Iterator[TestClient]:
    """A forecaster first, then reranker and encoder: the default text model is the reranker."""
    with folders_client(folders[n] for n in ["forecaster", RERANKER, ENCODER]) as c:
        yield c


def ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def embed(client: TestClient, texts: list[str], **body: Any) -> list[list[float]]:
    vectors: list[list[float]] = ok(client.post("/embed", json={"inputs": texts, **body}))
    return vectors


# ----------------------------------------------------------------------------- POST / by task


@pytest.mark.parametrize("path", ["/", "/invocations"])
def test_root_answers_as_the_task_of_the_model_it_names(client: TestClient, path: str) -> None:
    # Nothing named: the first loaded model, an encoder, embeds as /embed does.
    r = client.post(path, json={"inputs": TEXTS})
    assert ok(r) == embed(client, TEXTS) and r.headers["x-model"] == ENCODER
    assert ok(client.post(path, json={"inputs": "one"})) == embed(client, ["one"])
    # Named by the body: the reranker reranks as /rerank does, best first.
    rerank = {"query": "a query", "texts": TEXTS, "return_text": True}
    r = client.post(path, json={**rerank, "model": RERANKER})
    assert ok(r) == ok(client.post("/rerank", json={**rerank, "model": RERANKER}))
    assert r.headers["x-model"] == RERANKER and {x["index"] for x in r.json()} == {0, 1, 2}
    # Named by the header: the classifier predicts as /predict does (one input: one list).
    r = client.post(path, json={"inputs": "I like you."}, headers={"x-model": CLASSIFIER})
    predicted = ok(client.post("/predict", json={"inputs": "I like you.", "model": CLASSIFIER}))
    assert ok(r) == predicted and len(predicted) == 3
    assert r.headers["x-model"] == CLASSIFIER


def test_root_takes_what_huggingface_hub_sends(client: TestClient) -> None:
    # text_classification adds "parameters" (function_to_apply, top_k): ignored, as TEI does.
    body = {"inputs": "I like you.", "parameters": {"function_to_apply": "none", "top_k": 1}}
    r = client.post("/", json=body, headers={"x-model": CLASSIFIER})
    assert ok(r) == ok(client.post("/predict", json={"inputs": "I like you.", "model": CLASSIFIER}))
    # sentence_similarity posts TEI's similarity body to /: an encoder answers it.
    similar = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS}, "parameters": {}}
    scores = ok(client.post("/", json=similar))
    assert scores == ok(client.post("/similarity", json=similar))
    vectors = np.array(embed(client, TEXTS, normalize=False))
    expected = vectors @ vectors[0] / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(vectors[0]))
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    assert math.isclose(scores[0], 1.0, abs_tol=1e-6)


def test_similarity_parameters_reach_the_embeddings(client: TestClient) -> None:
    long = " ".join(f"word{i}" for i in range(100))  # over the encoder's 64 tokens
    body: dict[str, Any] = {"inputs": {"source_sentence": "query", "sentences": [long, "other"]}}
    refused = {**body, "parameters": {"truncate": False}}  # none: auto_truncate (on) cuts
    assert_error(client.post("/similarity", json=refused), 422, "invalid_request", "truncate")
    body["parameters"] = {"truncate": True, "truncation_direction": "Left", "prompt_name": "query"}
    scores = ok(client.post("/similarity", json=body))
    vectors = np.array(
        embed(
            client,
            ["query", long, "other"],
            truncate=True,
            truncation_direction="left",
            prompt_name="query",
        )
    )
    np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-6)


def test_the_default_model_is_the_first_text_model_loaded(forecaster_first: TestClient) -> None:
    c = forecaster_first
    r = c.post("/", json={"query": "q", "texts": ["a", "b"]})
    assert ok(r) == ok(c.post("/rerank", json={"query": "q", "texts": ["a", "b"]}))
    assert r.headers["x-model"] == RERANKER
    assert ok(c.get("/info"))["model_id"] == RERANKER
    # Routes that only encoders answer default to the first encoder.
    assert ok(c.post("/similarity", json={"inputs": {"source_sentence": "a", "sentences": ["b"]}}))
    assert c.post("/embed_all", json={"inputs": "a"}).headers["x-model"] == ENCODER


def test_naming_a_model_wrongly_is_a_4xx_that_says_so(client: TestClient) -> None:
    both = client.post("/", json={"inputs": "a", "model": ENCODER}, headers={"x-model": RERANKER})
    assert_error(both, 422, "invalid_request", "model field", "x-model header")
    unknown = client.post("/", json={"inputs": "a"}, headers={"x-model": "nope"})
    assert_error(unknown, 404, "model_not_found", "'nope'", ENCODER, RERANKER)
    forecaster = client.post("/", json={"inputs": "a", "model": "forecaster"})
    assert_error(forecaster, 422, "invalid_request", "forecast", "/forecast", ENCODER)
    reranker = client.post("/embed_all", json={"inputs": "a", "model": RERANKER})
    assert_error(reranker, 404, "model_not_found", ENCODER)
    assert_error(client.get("/info?model=forecaster"), 422, "invalid_request", "/forecast")


def test_a_body_the_task_does_not_take_is_a_422_naming_the_field(client: TestClient) -> None:
    # The encoder takes /embed's body: a rerank body misses inputs.
    r = client.post("/", json={"query": "q", "texts": ["a"]})
    assert_error(r, 422, "invalid_request", "body.inputs", "body.query")
    r = client.post("/", json={"inputs": "a", "model": RERANKER})
    assert_error(r, 422, "invalid_request", "body.query")
    assert_error(client.post("/", json=["a list"]), 422, "invalid_request", "body")
    bad = client.post("/", content=b'{"inputs": ', headers={"content-type": "application/json"})
    assert_error(bad, 422, "invalid_request", "malformed JSON")
    empty = {"inputs": {"source_sentence": "a", "sentences": []}}
    assert_error(client.post("/", json=empty), 422, "invalid_request", "sentences")


def test_the_root_body_is_documented_as_the_bodies_it_takes(client: TestClient) -> None:
    schema = ok(client.get("/openapi.json"))
    components = schema["components"]["schemas"]
    for path in ("/", "/invocations"):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        refs = [option["$ref"].rsplit("/", 1)[1] for option in body["schema"]["anyOf"]]
        assert refs and all(ref in components for ref in refs)


# ----------------------------------------------------------------------------- embed_all


def test_embed_all_is_sentence_transformers_token_embeddings(
    client: TestClient, folders: dict[str, Path]
) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folders[ENCODER]), device="cpu", local_files_only=True)
    for prompt in (None, "query"):
        r = client.post("/embed_all", json={"inputs": TEXTS, "prompt_name": prompt})
        got = ok(r)
        expected = model.encode(
            TEXTS, output_value="token_embeddings", prompt_name=prompt, batch_size=2
        )
        assert [len(rows) for rows in got] == [len(e) for e in expected]
        for mine, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(np.array(mine), theirs.numpy(), atol=1e-5)
    one = ok(client.post("/embed_all", json={"inputs": "x"}))
    assert len(one) == 1 and one[0] == ok(client.post("/embed_all", json={"inputs": ["x"]}))[0]


def test_embed_all_cuts_unless_told_not_to(client: TestClient) -> None:
    long = " ".join(f"word{i}" for i in range(100))
    refused = client.post("/embed_all", json={"inputs": [long], "truncate": False})
    assert_error(refused, 422, "invalid_request")  # no truncate: auto_truncate (on) cuts
    right = ok(client.post("/embed_all", json={"inputs": [long], "truncate": True}))
    left = ok(
        client.post(
            "/embed_all", json={"inputs": [long], "truncate": True, "truncation_direction": "left"}
        )
    )
    assert len(right[0]) == len(left[0]) == 64  # the encoder's max_seq_length
    assert right[0][5] != left[0][5]


def test_embed_all_refuses_an_answer_too_large_to_render(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import service.engine.servables.embed as text_servable

    # 32 hidden numbers per token: room for 100 tokens, under one text at the limit (64).
    monkeypatch.setattr(text_servable, "TOKEN_OUTPUT_VALUES", 32 * 100)
    words = " ".join(f"word{i}" for i in range(10))
    tokens = len(ok(client.post("/tokenize", json={"inputs": words}))[0])
    assert 25 < tokens < 50
    r = client.post("/embed_all", json={"inputs": [words] * 4})
    assert_error(r, 422, "invalid_request", f"{4 * tokens} tokens", "at most 100 tokens")
    assert len(ok(client.post("/embed_all", json={"inputs": [words] * 2}))) == 2
    monkeypatch.setattr(text_servable, "TOKEN_OUTPUT_VALUES", 32)  # a whole text still fits
    long = ok(client.post("/embed_all", json={"inputs": [words * 5], "truncate": True}))
    assert len(long[0]) == 64


def test_embed_all_rows_batch_apart_from_pooled_ones(client: TestClient) -> None:
    # Sent at once, pooled and per-token requests each get what they get alone.
    bodies = [{"inputs": [t]} for t in TEXTS]
    alone_all = [ok(client.post("/embed_all", json=b)) for b in bodies]
    alone_embed = [ok(client.post("/embed", json=b)) for b in bodies]
    mixed = [(path, b) for b in bodies for path in ("/embed_all", "/embed")]
    results = [ok(r) for r in post_all_paths(client, mixed)]
    for i in range(len(bodies)):
        np.testing.assert_allclose(results[2 * i], alone_all[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(results[2 * i + 1], alone_embed[i], rtol=1e-5, atol=1e-6)


def post_all_paths(client: TestClient, requests: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each ``(path, body)`` posted at once, responses in order (post_all for mixed paths)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda pb: client.post(pb[0], json=pb[1]), requests))


# ----------------------------------------------------------------------------- tokenize, decode


def byte_offset(text: str, char: int) -> int:
    return len(text[:char].encode("utf-8"))


@pytest.mark.parametrize("name", [ENCODER, RERANKER])
def test_tokenize_is_the_folders_tokenizer(
    client: TestClient, folders: dict[str, Path], name: str
) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(folders[name]))
    texts = ["Hello world, how are you?", "naïve café – déjà vu", "x"]
    got = ok(client.post("/tokenize", json={"inputs": texts, "model": name}))
    assert len(got) == len(texts)
    for text, tokens in zip(texts, got, strict=True):
        enc = reference(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        assert [t["id"] for t in tokens] == enc["input_ids"]
        assert [t["special"] for t in tokens] == [bool(m) for m in enc["special_tokens_mask"]]
        names = reference.convert_ids_to_tokens(enc["input_ids"])
        for token, (start, stop), name_ in zip(tokens, enc["offset_mapping"], names, strict=True):
            if token["special"]:
                assert (token["text"], token["start"], token["stop"]) == (name_, None, None)
            else:
                # TEI's offsets are UTF-8 byte offsets (the Rust tokenizer's), text the slice.
                assert token["text"] == text[start:stop]
                assert (token["start"], token["stop"]) == (
                    byte_offset(text, start),
                    byte_offset(text, stop),
                )
    bare = ok(client.post("/tokenize", json={"inputs": texts[0], "add_special_tokens": False}))
    assert [t["id"] for t in bare[0]] == reference(texts[0], add_special_tokens=False)["input_ids"]


def test_tokenize_puts_the_prompt_first(client: TestClient, folders: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(folders[ENCODER]))
    got = ok(client.post("/tokenize", json={"inputs": "the text", "prompt_name": "query"}))[0]
    assert [t["id"] for t in got] == reference("query: the text")["input_ids"]
    assert got[1]["start"] == 0  # offsets are into the text as sent with its prompt
    r = client.post("/tokenize", json={"inputs": "a", "prompt_name": "nope"})
    assert_error(r, 422, "invalid_request", "'nope'", "'query'")
    r = client.post("/tokenize", json={"inputs": "a", "prompt_name": "q", "model": RERANKER})
    assert_error(r, 422, "invalid_request", "no prompts")


def test_decode_round_trips_tokenize(client: TestClient, folders: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(folders[ENCODER]))
    tokens = ok(client.post("/tokenize", json={"inputs": TEXTS}))
    ids = [[t["id"] for t in row] for row in tokens]
    assert ok(client.post("/decode", json={"ids": ids})) == [
        reference.decode(row, skip_special_tokens=True) for row in ids
    ]
    assert ok(client.post("/decode", json={"ids": ids[0], "skip_special_tokens": False})) == [
        reference.decode(ids[0], skip_special_tokens=False)
    ]  # one list of ids: a list of one text, as TEI answers


def test_decode_refuses_ids_the_model_does_not_have(client: TestClient) -> None:
    r = client.post("/decode", json={"ids": [[2, 5], [2, 10**6]]})
    assert_error(r, 422, "invalid_request", "ids 1", "1000000", "vocabulary")
    assert_error(client.post("/decode", json={"ids": [-1]}), 422, "invalid_request", "ids")
    assert_error(client.post("/decode", json={"ids": []}), 422, "invalid_request", "empty")
    assert_error(client.post("/decode", json={"ids": [[]]}), 422, "invalid_request", "empty")
    assert_error(client.post("/decode", json={"ids": ["1"]}), 422, "invalid_request", "ids")


def test_tokenize_long_inputs_and_many_inputs(client: TestClient) -> None:
    long = "word " * 5000  # tokenized off the event loop; no token limit on /tokenize
    assert len(ok(client.post("/tokenize", json={"inputs": long}))[0]) > 1000
    many = client.post("/tokenize", json={"inputs": ["a"] * 10_000})
    assert_error(many, 422, "invalid_request", "too many inputs")


# ----------------------------------------------------------------------------- info, health


def test_info_has_teis_fields_for_the_named_model(client: TestClient) -> None:
    info = ok(client.get("/info"))
    assert list(info) == INFO_FIELDS
    assert info["model_id"] == info["served_model_name"] == ENCODER
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["model_dtype"] == "float32" and info["auto_truncate"] is True
    assert info["max_input_length"] == 64
    card = ok(client.get(f"/models/{ENCODER}"))
    assert info["max_batch_tokens"] == card["limits"]["max_batch_tokens"]
    assert info["max_client_batch_size"] == card["limits"]["max_inputs_per_request"]
    assert info["max_batch_requests"] == card["limits"]["max_batch_size"]
    assert isinstance(info["version"], str) and info["sha"] is None

    reranker = ok(client.get("/info", headers={"x-model": RERANKER}))["model_type"]
    assert reranker == {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    classifier = ok(client.get("/info", params={"model": CLASSIFIER}))["model_type"]
    labels = ["label_a", "label_b", "label_c"]
    assert classifier == {
        "classifier": {
            "id2label": {str(i): label for i, label in enumerate(labels)},
            "label2id": {label: i for i, label in enumerate(labels)},
        }
    }


def test_health_ping_and_get_root_answer_200_while_ready(text_double: Any) -> None:
    with TestClient(make_app([text_double], api_key="s3cret")) as c:
        for path in ("/ping", "/"):
            r = c.get(path)  # no API key: TEI's public routes
            assert r.status_code == 200 and r.content == b"", path
        # /health is infinity's too: its client parses {"unix": <time>}; TEI's read the status.
        r = c.get("/health")
        assert r.status_code == 200 and set(r.json()) == {"unix"}
        # The model routes still need the key, POST / among them.
        assert_error(c.post("/", json={"inputs": "a"}), 401, "unauthorized")
        assert_error(c.get("/info"), 401, "unauthorized")
        assert_error(c.post("/tokenize", json={"inputs": "a"}), 401, "unauthorized")
        key = {"authorization": "Bearer s3cret"}
        assert c.post("/", json={"inputs": "a"}, headers=key).status_code == 200
        c.app.state.attnserve.lifecycle.begin_drain()  # type: ignore[attr-defined]
        for path in ("/health", "/ping", "/"):
            assert_error(c.get(path), 503, "shutting_down")


def test_concurrent_root_requests_batch_like_embed(client: TestClient) -> None:
    bodies = [{"inputs": [t]} for t in TEXTS]
    together = [ok(r) for r in post_all(client, "/", bodies)]
    # Padded beside others, a row may differ from its lone self in the last bits only.
    np.testing.assert_allclose(together, [embed(client, [t]) for t in TEXTS], atol=1e-6)
