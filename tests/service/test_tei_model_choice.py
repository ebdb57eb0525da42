"""TEI's own routes (``/embed``, ``/rerank``, ``/predict``) with several models of a task loaded:
TEI serves one model, so its clients name none; here the ``model`` field or the ``x-model``
header picks one, else the first loaded model of the route's task answers (not a 404)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import assert_error, folders_client
from tests.utils.live_server import (
    DROP_IN_CLASSIFIER,
    DROP_IN_ENCODER,
    DROP_IN_RERANKER,
    drop_in_folders,
)
from tests.utils.tiny_classifiers import save_tiny_classifier
from tests.utils.tiny_encoders import save_tiny_encoder

SECOND_ENCODER, SECOND_RERANKER = "second-embedder", "second-reranker"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Two encoders, two rerankers and a classifier, the drop-in ones first."""
    root = tmp_path_factory.mktemp("tei-choice")
    folders: list[Path] = drop_in_folders(root)
    folders.append(save_tiny_encoder(root / SECOND_ENCODER, "bert", seed=7))
    folders.append(save_tiny_classifier(root / SECOND_RERANKER, "bert", 1, seed=8))
    with folders_client(folders) as c:
        yield c


def answer(r: Any) -> tuple[Any, str]:
    assert r.status_code == 200, r.text
    return r.json(), r.headers["x-model"]


@pytest.mark.parametrize(
    ("path", "body", "first", "second"),
    [
        ("/embed", {"inputs": ["a text"]}, DROP_IN_ENCODER, SECOND_ENCODER),
        ("/rerank", {"query": "q", "texts": ["a", "b c"]}, DROP_IN_RERANKER, SECOND_RERANKER),
        ("/predict", {"inputs": "a text"}, DROP_IN_RERANKER, DROP_IN_CLASSIFIER),
    ],
)
def test_teis_routes_take_the_header_or_answer_with_the_first_model(
    client: TestClient, path: str, body: dict[str, Any], first: str, second: str
) -> None:
    default, name = answer(client.post(path, json=body))
    assert name == first
    by_header, name = answer(client.post(path, json=body, headers={"x-model": second}))
    assert name == second and by_header != default
    by_field, name = answer(client.post(path, json={**body, "model": second}))
    assert (by_field, name) == (by_header, second)
    disagree = client.post(path, json={**body, "model": first}, headers={"x-model": second})
    assert_error(disagree, 422, "invalid_request", "model field", "x-model header")


def test_the_other_routes_still_ask_for_a_name_when_several_models_could_answer(
    client: TestClient,
) -> None:
    # /encode and /v1/rerank are attnserve's and Cohere's, whose clients name the model.
    r = client.post("/encode", json={"inputs": ["a"]})
    assert_error(r, 404, "model_not_found", DROP_IN_ENCODER, SECOND_ENCODER)
