"""Which activation each route applies (issue 43). ``/predict`` and ``/v1/classify`` give label
scores as text-embeddings-inference and transformers' pipeline do: softmax over several labels,
sigmoid for one, the logits with ``raw_scores``, whatever activation ``CrossEncoder.save`` wrote
(a 3-label cross-encoder is saved with ``Identity``). ``/rerank`` and ``/v1/rerank`` keep
``CrossEncoder.predict``'s scores (the saved activation)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.service.helpers import folders_client
from tests.utils.tiny_classifiers import (
    PAIRS,
    reference_probabilities,
    reference_scores,
    save_tiny_classifier,
)

TOLERANCE = 1e-4
INPUTS: list[Any] = ["Open file and return a stream.", ["a query", "a document about it"], "ok"]
IDENTITY = "torch.nn.modules.linear.Identity"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("label-scores")
    three = save_tiny_classifier(root / "ce-three", "bert", 3, cross_encoder=True, seed=3)
    one = save_tiny_classifier(root / "ce-logits", "bert", 1, cross_encoder=True, seed=4)
    # A reranker saved to score with its raw logits (CrossEncoder(..., activation_fn=Identity)).
    settings = one / "config_sentence_transformers.json"
    raw = json.loads(settings.read_text())
    raw["activation_fn"] = IDENTITY
    settings.write_text(json.dumps(raw))
    return {"ce-three": three, "ce-logits": one}


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]) -> Iterator[Any]:
    with folders_client(folders.values()) as c:
        yield c


def _by_label(ranked: list[dict[str, Any]], labels: list[str]) -> list[float]:
    scores = {item["label"]: item["score"] for item in ranked}
    return [scores[label] for label in labels]


def _predict(client: Any, name: str, raw: bool) -> np.ndarray:
    r = client.post("/predict", json={"model": name, "inputs": INPUTS, "raw_scores": raw})
    assert r.status_code == 200, r.text
    labels = client.get(f"/models/{name}").json()["labels"]
    return np.array([_by_label(row, labels) for row in r.json()])


def test_a_three_label_cross_encoder_predicts_a_softmax(
    client: Any, folders: dict[str, Path]
) -> None:
    # CrossEncoder.save wrote Identity: the raw logits before (issue 43).
    saved = json.loads((folders["ce-three"] / "config_sentence_transformers.json").read_text())
    assert saved["activation_fn"] == IDENTITY
    scores = _predict(client, "ce-three", raw=False)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)
    expected = reference_probabilities(folders["ce-three"], INPUTS)
    np.testing.assert_allclose(scores, expected, atol=TOLERANCE)
    logits = _predict(client, "ce-three", raw=True)
    assert not np.allclose(logits.sum(axis=1), 1.0, atol=1e-3)
    softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(softmax, scores, atol=1e-5)


def test_v1_classify_gives_the_same_softmax(client: Any) -> None:
    texts = [t for t in INPUTS if isinstance(t, str)]
    r = client.post("/v1/classify", json={"model": "ce-three", "input": texts})
    assert r.status_code == 200, r.text
    labels = client.get("/models/ce-three").json()["labels"]
    scores = np.array([_by_label(row, labels) for row in r.json()["data"]])
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(scores, _predict(client, "ce-three", raw=False)[[0, 2]], atol=1e-6)


def test_rerank_keeps_cross_encoder_scores_and_predict_a_sigmoid(
    client: Any, folders: dict[str, Path]
) -> None:
    pairs = PAIRS[:3]
    query = pairs[0][0]
    documents = [d for q, d in pairs if q == query]
    r = client.post("/rerank", json={"model": "ce-logits", "query": query, "texts": documents})
    assert r.status_code == 200, r.text
    got = sorted((item["index"], item["score"]) for item in r.json())
    expected = reference_scores(folders["ce-logits"], [(query, d) for d in documents])
    np.testing.assert_allclose([s for _, s in got], expected, atol=TOLERANCE)  # the logits
    predicted = _predict(client, "ce-logits", raw=False)
    logits = _predict(client, "ce-logits", raw=True)
    np.testing.assert_allclose(predicted, 1.0 / (1.0 + np.exp(-logits)), atol=1e-6)


def test_the_card_says_which_activation_each_route_applies(client: Any) -> None:
    three = client.get("/models/ce-three").json()
    assert three["score_activation"] == "softmax" and three["label_activation"] == "softmax"
    logits = client.get("/models/ce-logits").json()
    assert logits["score_activation"] == "identity" and logits["label_activation"] == "sigmoid"
