"""Reranking with the user's cross-encoders served from their folders: scores through HTTP
against sentence-transformers' ``CrossEncoder.predict`` for every architecture, under the exact
backends, alone and batched; every other backend answers or is refused by name; the rerank
shapes of the peers' APIs (Cohere/Jina ``/v1/rerank``, TEI's ``/rerank``), truncation, long
documents as windows, bfloat16 and the errors.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.attention import BACKENDS
from tests.service.classifiers.helpers import (
    EXACT,
    TOLERANCE,
    classify_name,
    post_rerank,
    rerank_name,
    scores_in_order,
)
from tests.service.helpers import assert_error
from tests.utils.tiny_classifiers import (
    DOCUMENTS,
    PAIRS,
    QUERIES,
    reference_scores,
)
from tests.utils.tiny_encoders import ARCHITECTURES

# ------------------------------------------------------------------- exactness


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("backend", EXACT)
def test_rerank_scores_match_cross_encoder_predict(
    client: Any, folders: dict[str, Path], arch: str, backend: str
) -> None:
    name = rerank_name(arch)
    expected = reference_scores(folders[name], PAIRS).reshape(len(QUERIES), len(DOCUMENTS))
    for q, query in enumerate(QUERIES):
        r = post_rerank(client, name, query, DOCUMENTS, attention=backend)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["attention"] == backend and body["model"] == name
        got = scores_in_order(body, len(DOCUMENTS))
        np.testing.assert_allclose(got, expected[q], atol=TOLERANCE)
        # Best first, every document once.
        ranked = [res["relevance_score"] for res in body["results"]]
        assert ranked == sorted(ranked, reverse=True)
        assert sorted(res["index"] for res in body["results"]) == list(range(len(DOCUMENTS)))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_document_alone_scores_as_in_a_batch(
    client: Any, folders: dict[str, Path], arch: str
) -> None:
    name = rerank_name(arch)
    together = scores_in_order(
        post_rerank(client, name, QUERIES[0], DOCUMENTS).json(), len(DOCUMENTS)
    )
    for i, document in enumerate(DOCUMENTS):
        alone = post_rerank(client, name, QUERIES[0], [document]).json()["results"][0]
        assert abs(alone["relevance_score"] - together[i]) <= TOLERANCE


def test_concurrent_rerank_requests_share_batches_and_keep_their_scores(
    client: Any, folders: dict[str, Path]
) -> None:
    name = rerank_name("bert")
    expected = reference_scores(folders[name], PAIRS).reshape(len(QUERIES), len(DOCUMENTS))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [
            pool.submit(post_rerank, client, name, QUERIES[i % len(QUERIES)], DOCUMENTS)
            for i in range(24)
        ]
        bodies = [f.result() for f in futures]
    batch_sizes = []
    for i, r in enumerate(bodies):
        assert r.status_code == 200, r.text
        got = scores_in_order(r.json(), len(DOCUMENTS))
        np.testing.assert_allclose(got, expected[i % len(QUERIES)], atol=TOLERANCE)
        batch_sizes.append(int(r.headers["x-batch-size"]))
    # Pairs of different requests ran in one forward pass at least once.
    assert max(batch_sizes) > len(DOCUMENTS), batch_sizes


# --------------------------------------------------------------- every backend


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_answers_or_is_refused_by_name(client: Any, arch: str, backend: str) -> None:
    name = rerank_name(arch)
    card = client.get(f"/models/{name}").json()
    r = post_rerank(client, name, QUERIES[0], DOCUMENTS, attention=backend)
    if backend in card["served_backends"]:
        assert r.status_code == 200, r.text
        assert len(r.json()["results"]) == len(DOCUMENTS)
        assert all(np.isfinite(res["relevance_score"]) for res in r.json()["results"])
    else:
        assert_error(r, 422, "invalid_request", backend, *card["served_backends"])


# ------------------------------------------------------------------ API shapes


def test_top_n_and_return_documents(client: Any) -> None:
    name = rerank_name("roberta")
    full = post_rerank(client, name, QUERIES[1], DOCUMENTS).json()["results"]
    r = post_rerank(client, name, QUERIES[1], DOCUMENTS, top_n=2, return_documents=True)
    body = r.json()
    assert [res["index"] for res in body["results"]] == [res["index"] for res in full[:2]]
    for res in body["results"]:
        assert res["document"] == {"text": DOCUMENTS[res["index"]]}
    assert all("document" not in res for res in full)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0


def test_raw_scores_are_the_logits_before_the_sigmoid(client: Any) -> None:
    name = rerank_name("distilbert")
    scored = scores_in_order(post_rerank(client, name, QUERIES[0], DOCUMENTS).json(), 5)
    raw = scores_in_order(
        post_rerank(client, name, QUERIES[0], DOCUMENTS, raw_scores=True).json(), 5
    )
    np.testing.assert_allclose(1.0 / (1.0 + np.exp(-raw)), scored, atol=1e-6)
    assert not np.allclose(raw, scored)


def test_tei_rerank_shape(client: Any) -> None:
    name = rerank_name("bert")
    v1 = post_rerank(client, name, QUERIES[0], DOCUMENTS).json()["results"]
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

    name = rerank_name(arch)
    # Head and tail share no sentence, so the kept tokens differ entirely between the two
    # directions: a document of one repeated sentence moved the random model's score by as
    # little as 2e-5 on another machine, under the tolerance.
    long_document = " ".join([DOCUMENTS[0]] * 30 + [DOCUMENTS[4]] * 30)
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


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_long_documents_as_windows_score_as_their_best_window(
    client: Any, folders: dict[str, Path], arch: str
) -> None:
    import torch
    import transformers as tf

    from models.text.classifier import TextClassifier

    name = rerank_name(arch)
    long = " ".join(DOCUMENTS[:4]) * 3  # several windows at 128 tokens
    query = QUERIES[0]
    r = post_rerank(client, name, query, [long, DOCUMENTS[1]], long_text="windows", truncate=False)
    assert r.status_code == 200, r.text
    got = scores_in_order(r.json(), 2)
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
    plain = scores_in_order(post_rerank(client, name, query, [long, DOCUMENTS[1]]).json(), 2)
    assert abs(got[1] - plain[1]) <= 1e-6
    assert_error(
        post_rerank(client, name, query, ["a"], long_text="windows", truncate=True),
        422,
        "invalid_request",
        "contradict",
    )


# ---------------------------------------------------------------------- errors


def test_rerank_errors_say_what_to_fix(client: Any) -> None:
    name = rerank_name("bert")
    assert_error(post_rerank(client, name, QUERIES[0], []), 422, "invalid_request", "documents")
    assert_error(
        post_rerank(client, name, QUERIES[0], ["fine", "  "]), 422, "invalid_request", "document 1"
    )
    long = "word " * 400
    r = client.post("/v1/rerank", json={"model": name, "query": "q", "documents": ["a", long]})
    assert_error(r, 422, "invalid_request", "document 1", "truncate")
    r = client.post(
        "/v1/rerank", json={"model": classify_name("bert"), "query": "q", "documents": ["a"]}
    )
    assert_error(r, 404, "model_not_found", rerank_name("bert"))
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["a"]})
    assert_error(r, 404, "model_not_found", "name a model")
    r = post_rerank(client, name, "q", ["a"], precision="bfloat16")
    assert_error(r, 422, "invalid_request", "bfloat16", "float32")
    # The server still serves.
    assert post_rerank(client, name, "q", ["a"]).status_code == 200


# ------------------------------------------------------------------- precision


def test_a_reranker_in_bfloat16(folders: dict[str, Path]) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    name = rerank_name("roberta")
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
        r = post_rerank(bf16_client, name, QUERIES[0], DOCUMENTS, precision="bfloat16")
        assert r.status_code == 200, r.text
        assert r.json()["precision"] == "bfloat16"
        got = scores_in_order(r.json(), len(DOCUMENTS))
        # bfloat16 keeps 8 bits of mantissa: close to float32's scores, not equal to them.
        assert np.abs(got - expected[0]).max() < 0.05
        assert not np.allclose(got, expected[0], atol=1e-6)
