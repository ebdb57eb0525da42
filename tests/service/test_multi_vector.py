"""Multi-vector (ColBERT-style) models served from their sentence-transformers folders:
``/encode`` and TEI's ``/embed_all`` answer one list of token vectors per text, equal to
``MultiVectorEncoder.encode_query`` / ``encode_document`` / ``encode`` (per ``input_type``) on the
exact backends; ``/v1/rerank`` and Cohere's ``/v2/rerank`` rank by its MaxSim; the routes that
answer one vector per text refuse with a 422 naming those that can; the card says what it is.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.helpers import assert_error, folders_client
from tests.utils.tiny_multi_vector import (
    TEXTS,
    TOKEN_DIM,
    reference_scores,
    reference_vectors,
    save_tiny_multi_vector,
)

# The reference: sentence-transformers 6's MultiVectorEncoder (older releases have none).
pytest.importorskip("sentence_transformers.multi_vector_encoder")

EXACT = ("flash", "full")
TOLERANCE = 1e-5
COLBERT, ATTEND = "colbert", "attend"  # served under their folders' names


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served-multi-vector")
    return {v: save_tiny_multi_vector(root / v, v) for v in (COLBERT, ATTEND)}


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]) -> Iterator[TestClient]:
    with folders_client(folders.values()) as c:
        yield c


def _close(got: list[Any], expected: list[np.ndarray]) -> float:
    """The largest difference, after checking each text has the same tokens and width."""
    assert [np.asarray(g).shape for g in got] == [e.shape for e in expected]
    return max(
        float(np.abs(np.asarray(g, dtype=np.float32) - e).max())
        for g, e in zip(got, expected, strict=True)
    )


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("side", ["query", "document", None])
@pytest.mark.parametrize("model", [COLBERT, ATTEND])
def test_encode_answers_the_token_vectors_of_sentence_transformers(
    client: TestClient, folders: dict[str, Path], model: str, side: str | None, backend: str
) -> None:
    body = {"model": model, "inputs": TEXTS, "attention": backend, "truncate": True}
    r = client.post("/encode", json={**body, "input_type": side})
    assert r.status_code == 200, r.text
    assert r.headers["x-attention"] == backend
    expected = reference_vectors(folders[model], TEXTS, side or "none")
    assert _close(r.json()["embeddings"], expected) <= TOLERANCE
    # TEI's /embed_all: the same vectors, bare.
    tei = client.post("/embed_all", json={**body, "input_type": side})
    assert tei.status_code == 200, tei.text
    assert _close(tei.json(), expected) <= TOLERANCE


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
@pytest.mark.parametrize("model", [COLBERT, ATTEND])
def test_rerank_ranks_by_maxsim(
    client: TestClient, folders: dict[str, Path], model: str, path: str
) -> None:
    query, documents = TEXTS[4], TEXTS
    expected = reference_scores(folders[model], query, documents)
    body = {"model": model, "query": query, "documents": documents, "truncate": True}
    if path == "/v2/rerank":
        body = {**body, "long_text": "truncate"}
        del body["truncate"]
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["index"] for x in results] == sorted(
        range(len(documents)), key=lambda i: -expected[i]
    )
    got = {x["index"]: x["relevance_score"] for x in results}
    np.testing.assert_allclose(
        [got[i] for i in range(len(documents))], expected, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"input": ["a text"]}),
        ("/v1/embed", {"texts": ["a text"]}),
        ("/v2/embed", {"texts": ["a text"], "input_type": "search_query"}),
        ("/embed", {"inputs": ["a text"]}),
    ],
)
def test_one_vector_routes_name_the_routes_that_can_answer(
    client: TestClient, path: str, body: dict[str, Any]
) -> None:
    r = client.post(path, json={"model": COLBERT, **body})
    assert_error(r, 422, "invalid_request", "multi-vector", "/encode", "/embed_all")


def test_the_card_says_multi_vector(client: TestClient) -> None:
    cards = {c["name"]: c for c in client.get("/models").json()["data"]}
    card = cards[COLBERT]
    assert card["output"] == "multi-vector" and card["dim"] == TOKEN_DIM
    settings = card["multi_vector"]
    assert settings["similarity"] == "maxsim" and settings["token_dim"] == TOKEN_DIM
    assert settings["sides"]["query"]["expansion"]["attend"] is False
    assert "," in settings["mask"]["skiplist_words"]
    assert cards[ATTEND]["multi_vector"]["similarity"] == "meanmaxsim"
    assert "/encode" in card["routes"] and "/v2/rerank" in card["routes"]
    assert "/v1/embeddings" not in card["routes"]


def test_tei_rerank_by_name_ranks_by_maxsim(client: TestClient, folders: dict[str, Path]) -> None:
    expected = reference_scores(folders[COLBERT], TEXTS[4], TEXTS)
    body = {"model": COLBERT, "query": TEXTS[4], "texts": TEXTS, "truncate": True}
    r = client.post("/rerank", json=body)
    assert r.status_code == 200, r.text
    got = {x["index"]: x["score"] for x in r.json()}
    np.testing.assert_allclose([got[i] for i in range(len(TEXTS))], expected, rtol=1e-5, atol=1e-5)


def test_input_type_on_a_sentence_encoder_picks_its_prompt(tmp_path: Path) -> None:
    """The field is not multi-vector only: a sentence encoder prepends its query or document
    prompt, as sentence-transformers' encode_query / encode_document do."""
    from tests.utils.tiny_encoders import save_tiny_encoder

    prompts = {"query": "query: ", "document": "passage: "}
    folder = save_tiny_encoder(tmp_path / "prompted", "bert", prompts=prompts, layers=1)
    with folders_client([folder]) as c:

        def encode(**fields: Any) -> Any:
            r = c.post("/encode", json={"model": "prompted", "inputs": ["a text"], **fields})
            assert r.status_code == 200, r.text
            return r.json()["embeddings"]

        assert encode(input_type="query") == encode(prompt_name="query")
        assert encode(input_type="document") == encode(prompt_name="document")
        assert encode(input_type="query") != encode()


def test_a_broken_folder_stops_start_up_in_one_line(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    broken = tmp_path / "broken-colbert"
    shutil.copytree(folders[COLBERT], broken)
    config = broken / "1_Dense" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "in_features": 7}))
    settings = Settings(models=(str(broken),), device="cpu", background_load=False)
    with pytest.raises(ModelLoadError) as info:
        load_servables(settings, "cpu")
    message = str(info.value)
    assert "\n" not in message and str(broken) in message and "1_Dense" in message, message


@pytest.mark.parametrize(
    ("input_type", "names"),
    [(None, "texts sent without input_type"), ("document", "document texts")],
)
def test_an_over_long_text_names_the_limit_of_its_side(
    client: TestClient, input_type: str | None, names: str
) -> None:
    body: dict[str, Any] = {"model": COLBERT, "inputs": ["word " * 2000]}
    if input_type:
        body["input_type"] = input_type
    assert_error(client.post("/encode", json=body), 422, "invalid_request", names, "truncate")
