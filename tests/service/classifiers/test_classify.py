"""Label scores from the user's classifiers (and cross-encoders) served from their folders:
``/predict`` against the transformers class's softmax for every architecture and head setting,
under the exact backends; the classify shapes of the peers' APIs (TEI's ``/predict``,
infinity's ``/v1/classify``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.service.classifiers.helpers import (
    EXACT,
    PREDICT_INPUTS,
    TOLERANCE,
    classify_name,
    post_rerank,
    rerank_name,
)
from tests.utils.tiny_classifiers import (
    DOCUMENTS,
    QUERIES,
    reference_probabilities,
)
from tests.utils.tiny_encoders import ARCHITECTURES

# ------------------------------------------------------------------- exactness


@pytest.mark.parametrize("arch", [*ARCHITECTURES, "modernbert-mean", "modernbert-silu"])
@pytest.mark.parametrize("backend", EXACT)
def test_predict_matches_the_classifier_softmax(
    client: Any, folders: dict[str, Path], arch: str, backend: str
) -> None:
    name = classify_name(arch)
    expected = reference_probabilities(folders[name], PREDICT_INPUTS)
    r = client.post(
        "/predict", json={"model": name, "inputs": PREDICT_INPUTS, "attention": backend}
    )
    assert r.status_code == 200, r.text
    answers = r.json()
    assert len(answers) == len(PREDICT_INPUTS)
    labels = [f"label_{chr(97 + i)}" for i in range(expected.shape[1])]
    for row, answer in zip(expected, answers, strict=True):
        got = {item["label"]: item["score"] for item in answer}
        assert set(got) == set(labels)
        np.testing.assert_allclose([got[label] for label in labels], row, atol=TOLERANCE)
        scores = [item["score"] for item in answer]
        assert scores == sorted(scores, reverse=True)


# ------------------------------------------------------------------ API shapes


def test_predict_takes_one_text_one_pair_or_a_list(client: Any, folders: dict[str, Path]) -> None:
    name = classify_name("bert")
    pair = PREDICT_INPUTS[1]
    expected = reference_probabilities(folders[name], [PREDICT_INPUTS[0], pair])
    one = client.post("/predict", json={"model": name, "inputs": PREDICT_INPUTS[0]}).json()
    as_pair = client.post("/predict", json={"model": name, "inputs": pair}).json()
    # One input answers a flat list; as in TEI, a list of exactly two strings is one pair.
    assert isinstance(one[0], dict) and isinstance(as_pair[0], dict)
    for answer, row in ((one, expected[0]), (as_pair, expected[1])):
        got = {item["label"]: item["score"] for item in answer}
        np.testing.assert_allclose([got[k] for k in sorted(got)], row, atol=TOLERANCE)


def test_infinity_classify_shape(client: Any) -> None:
    name = classify_name("xlm-roberta")
    texts = ["first text", "second text", "third"]
    r = client.post("/v1/classify", json={"model": name, "input": texts})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "classify" and len(body["data"]) == 3
    tei = client.post("/predict", json={"model": name, "inputs": texts}).json()
    assert body["data"] == tei


def test_a_reranker_also_answers_predict_with_its_sigmoid(client: Any) -> None:
    name = rerank_name("mpnet")
    pair = [QUERIES[0], DOCUMENTS[0]]
    v1 = post_rerank(client, name, QUERIES[0], DOCUMENTS[:1]).json()["results"][0]
    predicted = client.post("/predict", json={"model": name, "inputs": pair}).json()
    assert len(predicted) == 1 and predicted[0]["label"] == "LABEL_0"
    assert abs(predicted[0]["score"] - v1["relevance_score"]) < 1e-6
