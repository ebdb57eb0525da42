"""The user's cross-encoders and classifiers served from their folders: scores through HTTP
against sentence-transformers' ``CrossEncoder.predict`` and the transformers class's softmax,
for every architecture, under the exact backends, alone and batched; every other backend
answers or is refused by name; the rerank and classify shapes of the peers' APIs.

The models are tiny and random (``tests/utils/tiny_classifiers.py``), built with transformers'
own ``...ForSequenceClassification`` classes and saved by ``CrossEncoder.save`` or
``save_pretrained``.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.attention import BACKENDS
from tests.service.helpers import assert_error, folders_client
from tests.utils.tiny_classifiers import (
    DOCUMENTS,
    PAIRS,
    QUERIES,
    reference_probabilities,
    reference_scores,
    save_tiny_classifier,
)
from tests.utils.tiny_encoders import ARCHITECTURES

TOLERANCE = 1e-4
EXACT = ("full", "flash")
PREDICT_INPUTS: list[Any] = [
    "Open file and return a stream.",
    ["what does a context manager do", "It suppresses the specified exceptions."],
    "ok",
]


def _rerank_name(arch: str) -> str:
    return f"rerank-{arch}"


def _classify_name(arch: str) -> str:
    return f"classify-{arch}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("classifiers")
    out = {}
    for i, arch in enumerate(ARCHITECTURES):
        # Cross-encoders as CrossEncoder.save writes them; classifiers as save_pretrained does.
        out[_rerank_name(arch)] = save_tiny_classifier(
            root / _rerank_name(arch), arch, 1, cross_encoder=True, seed=i
        )
        out[_classify_name(arch)] = save_tiny_classifier(
            root / _classify_name(arch), arch, 3, seed=10 + i
        )
    out["classify-modernbert-mean"] = save_tiny_classifier(
        root / "classify-modernbert-mean", "modernbert", 2, seed=31, classifier_pooling="mean"
    )
    # Head settings transformers reads from the config: another activation, no dense bias.
    out["classify-modernbert-silu"] = save_tiny_classifier(
        root / "classify-modernbert-silu",
        "modernbert",
        3,
        seed=32,
        classifier_activation="silu",
        classifier_bias=False,
    )
    return out


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]):
    with folders_client(folders.values()) as c:
        yield c


def _rerank(client: Any, model: str, query: str, documents: list[str], **extra: Any) -> Any:
    body = {"model": model, "query": query, "documents": documents, "truncate": True, **extra}
    return client.post("/v1/rerank", json=body)


def _scores_in_order(body: dict[str, Any], n: int) -> np.ndarray:
    out = np.full(n, np.nan, dtype=np.float32)
    for result in body["results"]:
        out[result["index"]] = result["relevance_score"]
    return out


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("backend", EXACT)
def test_rerank_scores_match_cross_encoder_predict(
    client: Any, folders: dict[str, Path], arch: str, backend: str
) -> None:
    name = _rerank_name(arch)
    expected = reference_scores(folders[name], PAIRS).reshape(len(QUERIES), len(DOCUMENTS))
    for q, query in enumerate(QUERIES):
        r = _rerank(client, name, query, DOCUMENTS, attention=backend)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["attention"] == backend and body["model"] == name
        got = _scores_in_order(body, len(DOCUMENTS))
        np.testing.assert_allclose(got, expected[q], atol=TOLERANCE)
        # Best first, every document once.
        ranked = [res["relevance_score"] for res in body["results"]]
        assert ranked == sorted(ranked, reverse=True)
        assert sorted(res["index"] for res in body["results"]) == list(range(len(DOCUMENTS)))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_document_alone_scores_as_in_a_batch(
    client: Any, folders: dict[str, Path], arch: str
) -> None:
    name = _rerank_name(arch)
    together = _scores_in_order(_rerank(client, name, QUERIES[0], DOCUMENTS).json(), len(DOCUMENTS))
    for i, document in enumerate(DOCUMENTS):
        alone = _rerank(client, name, QUERIES[0], [document]).json()["results"][0]
        assert abs(alone["relevance_score"] - together[i]) <= TOLERANCE


@pytest.mark.parametrize("arch", [*ARCHITECTURES, "modernbert-mean", "modernbert-silu"])
@pytest.mark.parametrize("backend", EXACT)
def test_predict_matches_the_classifier_softmax(
    client: Any, folders: dict[str, Path], arch: str, backend: str
) -> None:
    name = _classify_name(arch)
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


def test_concurrent_rerank_requests_share_batches_and_keep_their_scores(
    client: Any, folders: dict[str, Path]
) -> None:
    name = _rerank_name("bert")
    expected = reference_scores(folders[name], PAIRS).reshape(len(QUERIES), len(DOCUMENTS))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [
            pool.submit(_rerank, client, name, QUERIES[i % len(QUERIES)], DOCUMENTS)
            for i in range(24)
        ]
        bodies = [f.result() for f in futures]
    batch_sizes = []
    for i, r in enumerate(bodies):
        assert r.status_code == 200, r.text
        got = _scores_in_order(r.json(), len(DOCUMENTS))
        np.testing.assert_allclose(got, expected[i % len(QUERIES)], atol=TOLERANCE)
        batch_sizes.append(int(r.headers["x-batch-size"]))
    # Pairs of different requests ran in one forward pass at least once.
    assert max(batch_sizes) > len(DOCUMENTS), batch_sizes


# ----------------------------------------------------------------------------- every backend


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_answers_or_is_refused_by_name(client: Any, arch: str, backend: str) -> None:
    name = _rerank_name(arch)
    card = client.get(f"/models/{name}").json()
    r = _rerank(client, name, QUERIES[0], DOCUMENTS, attention=backend)
    if backend in card["served_backends"]:
        assert r.status_code == 200, r.text
        assert len(r.json()["results"]) == len(DOCUMENTS)
        assert all(np.isfinite(res["relevance_score"]) for res in r.json()["results"])
    else:
        assert_error(r, 422, "invalid_request", backend, *card["served_backends"])


# ----------------------------------------------------------------------------- API shapes


def test_top_n_and_return_documents(client: Any) -> None:
    name = _rerank_name("roberta")
    full = _rerank(client, name, QUERIES[1], DOCUMENTS).json()["results"]
    r = _rerank(client, name, QUERIES[1], DOCUMENTS, top_n=2, return_documents=True)
    body = r.json()
    assert [res["index"] for res in body["results"]] == [res["index"] for res in full[:2]]
    for res in body["results"]:
        assert res["document"] == {"text": DOCUMENTS[res["index"]]}
    assert all("document" not in res for res in full)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0


def test_raw_scores_are_the_logits_before_the_sigmoid(client: Any) -> None:
    name = _rerank_name("distilbert")
    scored = _scores_in_order(_rerank(client, name, QUERIES[0], DOCUMENTS).json(), 5)
    raw = _scores_in_order(_rerank(client, name, QUERIES[0], DOCUMENTS, raw_scores=True).json(), 5)
    np.testing.assert_allclose(1.0 / (1.0 + np.exp(-raw)), scored, atol=1e-6)
    assert not np.allclose(raw, scored)


def test_tei_rerank_shape(client: Any) -> None:
    name = _rerank_name("bert")
    v1 = _rerank(client, name, QUERIES[0], DOCUMENTS).json()["results"]
    r = client.post(
        "/rerank",
        json={
            "model": name,
            "query": QUERIES[0],
            "texts": DOCUMENTS,
            "return_text": True,
            "truncate": True,
        },
    )
    assert r.status_code == 200, r.text
    ranks = r.json()
    assert [x["index"] for x in ranks] == [x["index"] for x in v1]
    np.testing.assert_allclose(
        [x["score"] for x in ranks], [x["relevance_score"] for x in v1], atol=1e-7
    )
    assert all(x["text"] == DOCUMENTS[x["index"]] for x in ranks)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_truncation_direction_left_cuts_the_start_as_cross_encoder_does(
    client: Any, folders: dict[str, Path], arch: str
) -> None:
    """TEI's ``truncation_direction: Left``: over the limit, the longer text loses its first
    tokens (CrossEncoder with the tokenizer's ``truncation_side="left"`` is the reference)."""
    from sentence_transformers import CrossEncoder

    name = _rerank_name(arch)
    long_document = " ".join(f"{DOCUMENTS[0]} part {i}." for i in range(60))
    left_model = CrossEncoder(
        str(folders[name]),
        device="cpu",
        local_files_only=True,
        tokenizer_kwargs={"truncation_side": "left"},
    )
    pairs = [(QUERIES[0], long_document), (QUERIES[0], DOCUMENTS[1])]
    expected = left_model.predict(pairs, convert_to_numpy=True)
    body = {"model": name, "query": QUERIES[0], "texts": [long_document, DOCUMENTS[1]]}
    left = client.post("/rerank", json={**body, "truncate": True, "truncation_direction": "Left"})
    right = client.post("/rerank", json={**body, "truncate": True})
    assert left.status_code == right.status_code == 200, left.text
    by_index = {x["index"]: x["score"] for x in left.json()}
    np.testing.assert_allclose([by_index[0], by_index[1]], expected, atol=TOLERANCE)
    right_scores = {x["index"]: x["score"] for x in right.json()}
    assert right_scores[1] == pytest.approx(by_index[1], abs=TOLERANCE)  # within the limit
    assert abs(right_scores[0] - by_index[0]) > TOLERANCE  # other tokens were kept
    # /predict and /v1/rerank take the field too.
    predict = client.post(
        "/predict",
        json={
            "model": name,
            "inputs": [QUERIES[0], long_document],
            "truncate": True,
            "truncation_direction": "left",
        },
    )
    assert predict.status_code == 200, predict.text


def test_predict_takes_one_text_one_pair_or_a_list(client: Any, folders: dict[str, Path]) -> None:
    name = _classify_name("bert")
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
    name = _classify_name("xlm-roberta")
    texts = ["first text", "second text", "third"]
    r = client.post("/v1/classify", json={"model": name, "input": texts})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "classify" and len(body["data"]) == 3
    tei = client.post("/predict", json={"model": name, "inputs": texts}).json()
    assert body["data"] == tei


def test_a_reranker_also_answers_predict_with_its_sigmoid(client: Any) -> None:
    name = _rerank_name("mpnet")
    pair = [QUERIES[0], DOCUMENTS[0]]
    v1 = _rerank(client, name, QUERIES[0], DOCUMENTS[:1]).json()["results"][0]
    predicted = client.post("/predict", json={"model": name, "inputs": pair}).json()
    assert len(predicted) == 1 and predicted[0]["label"] == "LABEL_0"
    assert abs(predicted[0]["score"] - v1["relevance_score"]) < 1e-6


# ----------------------------------------------------------------------------- errors


def test_rerank_errors_say_what_to_fix(client: Any) -> None:
    name = _rerank_name("bert")
    assert_error(_rerank(client, name, QUERIES[0], []), 422, "invalid_request", "documents")
    assert_error(
        _rerank(client, name, QUERIES[0], ["fine", "  "]), 422, "invalid_request", "document 1"
    )
    long = "word " * 400
    r = client.post("/v1/rerank", json={"model": name, "query": "q", "documents": ["a", long]})
    assert_error(r, 422, "invalid_request", "document 1", "truncate")
    r = client.post(
        "/v1/rerank", json={"model": _classify_name("bert"), "query": "q", "documents": ["a"]}
    )
    assert_error(r, 404, "model_not_found", _rerank_name("bert"))
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["a"]})
    assert_error(r, 404, "model_not_found", "name a model")
    r = _rerank(client, name, "q", ["a"], precision="bfloat16")
    assert_error(r, 422, "invalid_request", "bfloat16", "float32")
    # The server still serves.
    assert _rerank(client, name, "q", ["a"]).status_code == 200


def test_cards_say_task_labels_and_routes(client: Any) -> None:
    cards = {c["name"]: c for c in client.get("/models").json()["data"]}
    rerank = cards[_rerank_name("bert")]
    assert rerank["task"] == "rerank" and rerank["labels"] == ["LABEL_0"]
    assert rerank["score_activation"] == "sigmoid" and "/v1/rerank" in rerank["routes"]
    assert rerank["source"] == "cross-encoder folder"
    classify = cards[_classify_name("bert")]
    assert classify["task"] == "classify" and classify["labels"] == [
        "label_a",
        "label_b",
        "label_c",
    ]
    assert classify["score_activation"] == "softmax"
    assert {"/predict", "/v1/classify"} <= set(classify["routes"])
    assert "/rerank" not in classify["routes"] and "/v1/rerank" not in classify["routes"]
    assert classify["max_tokens"] == 128 and "flash" in classify["served_backends"]
    assert cards["classify-modernbert-mean"]["classifier_pooling"] == "mean"


def test_openapi_lists_the_new_routes(client: Any) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("/v1/rerank", "/rerank", "/predict", "/v1/classify"):
        assert "post" in paths[route], route


def test_metrics_carry_the_new_routes(client: Any) -> None:
    name = _rerank_name("bert")
    assert _rerank(client, name, "q", ["a"]).status_code == 200
    assert client.post("/predict", json={"model": name, "inputs": "a"}).status_code == 200
    text = client.get("/metrics").text
    for route in ("/v1/rerank", "/predict"):
        line = next(
            (
                row
                for row in text.splitlines()
                if row.startswith("attnserve_requests_total{")
                and f'endpoint="{route}"' in row
                and f'model="{name}"' in row
                and 'status="200"' in row
            ),
            None,
        )
        assert line is not None and float(line.rsplit(" ", 1)[1]) >= 1, route


def test_a_reranker_in_bfloat16(folders: dict[str, Path]) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    name = _rerank_name("roberta")
    settings = Settings(
        models=(str(folders[name]),),
        device="cpu",
        background_load=False,
        max_wait_ms=0.0,
        precisions=("float32", "bfloat16"),
    )
    expected = reference_scores(folders[name], PAIRS).reshape(len(QUERIES), len(DOCUMENTS))
    with TestClient(create_app(settings)) as bf16_client:
        card = bf16_client.get(f"/models/{name}").json()
        assert card["precisions"] == ["float32", "bfloat16"]
        r = _rerank(bf16_client, name, QUERIES[0], DOCUMENTS, precision="bfloat16")
        assert r.status_code == 200, r.text
        assert r.json()["precision"] == "bfloat16"
        got = _scores_in_order(r.json(), len(DOCUMENTS))
        # bfloat16 keeps 8 bits of mantissa: close to float32's scores, not equal to them.
        assert np.abs(got - expected[0]).max() < 0.05
        assert not np.allclose(got, expected[0], atol=1e-6)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_long_documents_as_windows_score_as_their_best_window(
    client: Any, folders: dict[str, Path], arch: str
) -> None:
    import torch
    import transformers as tf

    from models.text.classifier import TextClassifier

    name = _rerank_name(arch)
    long = " ".join(DOCUMENTS[:4]) * 3  # several windows at 128 tokens
    query = QUERIES[0]
    r = _rerank(client, name, query, [long, DOCUMENTS[1]], long_text="windows", truncate=False)
    assert r.status_code == 200, r.text
    got = _scores_in_order(r.json(), 2)
    # The reference: transformers' own class on every window row, best sigmoid per document.
    split = TextClassifier.from_folder(folders[name]).tokenizer.windows([(query, long)])
    assert len(split.rows) >= 3 and all(len(row) <= 128 for row in split.rows)
    model = tf.AutoModelForSequenceClassification.from_pretrained(str(folders[name])).eval()
    with torch.no_grad():
        best = max(
            torch.sigmoid(
                model(
                    input_ids=torch.tensor([row.ids]),
                    **({"token_type_ids": torch.tensor([row.types])} if arch == "bert" else {}),
                ).logits
            ).item()
            for row in split.rows
        )
    assert abs(got[0] - best) <= TOLERANCE
    # A pair within the limit is one row: the same score as without windows.
    plain = _scores_in_order(_rerank(client, name, query, [long, DOCUMENTS[1]]).json(), 2)
    assert abs(got[1] - plain[1]) <= 1e-6
    assert_error(
        _rerank(client, name, query, ["a"], long_text="windows", truncate=True),
        422,
        "invalid_request",
        "contradict",
    )


def test_model_dir_serves_cross_encoders_and_classifiers(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from service.engine.registry import load_servables
    from service.engine.servables.classify import Scores
    from service.engine.servables.text import TextServable
    from service.settings import Settings

    for name in (_rerank_name("bert"), _classify_name("mpnet")):
        shutil.copytree(folders[name], tmp_path / name)
    given = str(folders[_classify_name("distilbert")])
    settings = Settings(models=(given,), model_dir=tmp_path, device="cpu")
    by_name = {s.name: s for s in load_servables(settings, "cpu")}
    assert set(by_name) == {
        _rerank_name("bert"),
        _classify_name("mpnet"),
        _classify_name("distilbert"),
    }
    assert all(isinstance(s, TextServable) for s in by_name.values())
    assert all(isinstance(s.head, Scores) for s in by_name.values())
    assert by_name[_rerank_name("bert")].task == "rerank"
    assert by_name[_classify_name("mpnet")].task == "classify"
