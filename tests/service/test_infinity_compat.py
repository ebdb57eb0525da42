"""infinity (michaelfeil/infinity, ``infinity_emb``) as a drop-in peer (issue 43): every route
its generated client, ``infinity_client`` 0.0.78, calls answers the way that client parses.

The client pins ``httpx<0.28`` and cannot live beside the newest openai / cohere /
huggingface_hub in the dev extra, so these tests send with httpx exactly the bodies its models'
``to_dict()`` build with their defaults (``OpenAIEmbeddingInputText``: ``model:
"default/not-specified"``, ``dimensions: 0``, ``modality: "text"``; ``RerankInput``:
``return_documents: false``, ``raw_scores: false``, the same model; ``ClassifyInput``: the same
model, ``raw_scores: false``), to the paths its ``api/default/*.py`` call, and check the answers by
the rules its ``from_dict()`` apply (required keys, the enum values it accepts). The real client
was run against a real server by hand (docs/compatibility.md, infinity). Values are compared with
sentence-transformers' ``encode`` and ``CrossEncoder.predict`` on the same folders.
"""

from __future__ import annotations

import base64
import math
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.utils.live_server import DROP_IN_CLASSIFIER, DROP_IN_ENCODER, DROP_IN_RERANKER
from tests.utils.tiny_classifiers import reference_probabilities, reference_scores
from tests.utils.tiny_encoders import reference_embeddings

SENTINEL = "default/not-specified"  # infinity's default model name: "whichever is served"
TEXTS = ["Munich is in Germany.", "The sky is blue.", "Where is Munich?", "a b c d e f g"]
QUERY = "Where is Munich?"


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def usage_ok(answer: dict[str, Any]) -> None:
    """infinity's ``Usage.from_dict``: both counts required."""
    usage = answer["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] > 0


# ----------------------------------------------------------------------------- embeddings


@pytest.mark.parametrize("path", ["/embeddings", "/v1/embeddings"])
def test_embeddings_with_the_clients_defaults_are_sentence_transformers(
    drop_in_url: str, drop_in_paths: list[Path], path: str
) -> None:
    # OpenAIEmbeddingInputText(input=TEXTS).to_dict(): the sentinel, dimensions 0, modality text.
    body = {"input": TEXTS, "model": SENTINEL, "dimensions": 0, "modality": "text"}
    answer = ok(post(drop_in_url, path, body))
    assert answer["object"] == "list" and answer["model"] == DROP_IN_ENCODER
    assert [item["index"] for item in answer["data"]] == list(range(len(TEXTS)))
    assert {item["object"] for item in answer["data"]} == {"embedding"}
    usage_ok(answer)
    got = np.array([item["embedding"] for item in answer["data"]], dtype=np.float32)
    want = reference_embeddings(drop_in_paths[0], TEXTS)
    assert got.shape == want.shape  # dimensions 0: the whole embedding, as infinity reads it
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_embeddings_base64_and_a_named_model_decode_to_the_float_answer(drop_in_url: str) -> None:
    floats = ok(post(drop_in_url, "/embeddings", {"input": TEXTS, "model": SENTINEL}))
    body = {
        "input": TEXTS,
        "model": DROP_IN_ENCODER,
        "encoding_format": "base64",
        "dimensions": 0,
        "modality": "text",
    }
    packed = ok(post(drop_in_url, "/embeddings", body))
    for a, b in zip(floats["data"], packed["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(a["embedding"], dtype=np.float32))


def test_embeddings_dimensions_shorten_as_the_openai_route_does(drop_in_url: str) -> None:
    body = {"input": TEXTS, "model": SENTINEL, "dimensions": 8, "modality": "text"}
    short = ok(post(drop_in_url, "/embeddings", body))
    openai = ok(
        post(
            drop_in_url,
            "/v1/embeddings",
            {"input": TEXTS, "model": DROP_IN_ENCODER, "dimensions": 8},
        )
    )
    assert [len(d["embedding"]) for d in short["data"]] == [8] * len(TEXTS)
    assert [d["embedding"] for d in short["data"]] == [d["embedding"] for d in openai["data"]]


@pytest.mark.parametrize("modality", ["image", "audio"])
def test_other_modalities_are_a_422_saying_only_text_is_served(
    drop_in_url: str, modality: str
) -> None:
    body = {"input": ["data:image/png;base64,AAAA"], "model": SENTINEL, "modality": modality}
    r = post(drop_in_url, "/embeddings", body)
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    assert "modality" in message and "only text" in message, message


# ----------------------------------------------------------------------------- rerank


def infinity_rerank(url: str, **fields: Any) -> dict[str, Any]:
    """``POST /rerank`` with ``RerankInput(query, documents, **fields).to_dict()``."""
    body = {
        "query": QUERY,
        "documents": TEXTS,
        "return_documents": False,
        "raw_scores": False,
        "model": SENTINEL,
        **fields,
    }
    answer = ok(post(url, "/rerank", body))
    # ReRankResult.from_dict: results, model, usage required; object must be "rerank".
    assert answer["object"] == "rerank" and answer["model"] == DROP_IN_RERANKER
    usage_ok(answer)
    return answer


def test_rerank_with_infinitys_body_scores_as_cross_encoder_predict_best_first(
    drop_in_url: str, drop_in_paths: list[Path]
) -> None:
    answer = infinity_rerank(drop_in_url)
    want = reference_scores(drop_in_paths[1], [(QUERY, t) for t in TEXTS])
    results = answer["results"]
    assert [r["index"] for r in results] == [int(i) for i in np.argsort(-want, kind="stable")]
    assert all("document" not in r for r in results)  # return_documents false: left out
    got = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_rerank_return_documents_are_strings_and_top_n_keeps_the_best(drop_in_url: str) -> None:
    every = infinity_rerank(drop_in_url)["results"]
    best = infinity_rerank(drop_in_url, return_documents=True, top_n=2)["results"]
    assert [r["index"] for r in best] == [r["index"] for r in every[:2]]
    # infinity's ReRankObject.document is the text itself (Cohere's shape nests it in {"text"}).
    assert [r["document"] for r in best] == [TEXTS[r["index"]] for r in best]


def test_rerank_raw_scores_are_the_logits(drop_in_url: str) -> None:
    activated = infinity_rerank(drop_in_url)["results"]
    raw = infinity_rerank(drop_in_url, raw_scores=True)["results"]
    assert [r["index"] for r in raw] == [r["index"] for r in activated]
    for a, r in zip(activated, raw, strict=True):  # the reranker's activation is a sigmoid
        assert 1 / (1 + math.exp(-r["relevance_score"])) == pytest.approx(a["relevance_score"])


def test_rerank_still_answers_teis_body_with_teis_bare_list(drop_in_url: str) -> None:
    infinity = infinity_rerank(drop_in_url)["results"]
    tei = ok(post(drop_in_url, "/rerank", {"query": QUERY, "texts": TEXTS, "return_text": True}))
    assert [r["index"] for r in tei] == [r["index"] for r in infinity]
    assert [r["score"] for r in tei] == [r["relevance_score"] for r in infinity]
    assert [r["text"] for r in tei] == [TEXTS[r["index"]] for r in tei]


def test_rerank_errors_name_the_fields_of_the_body_sent(drop_in_url: str) -> None:
    r = post(drop_in_url, "/rerank", {"query": QUERY, "documents": TEXTS, "top_n": 0})
    message = r.json()["error"]["message"]
    assert r.status_code == 422 and "body.top_n: Input should be greater than" in message, message
    r = post(drop_in_url, "/rerank", {"query": QUERY})  # neither: TEI's body, as before
    assert r.status_code == 422 and "body.texts: Field required" in r.text, r.text


# ----------------------------------------------------------------------------- classify


def test_classify_is_infinitys_answer_with_the_models_probabilities(
    drop_in_url: str, drop_in_paths: list[Path]
) -> None:
    body = {"input": TEXTS, "model": DROP_IN_CLASSIFIER, "raw_scores": False}
    answer = ok(post(drop_in_url, "/classify", body))
    assert answer["object"] == "classify" and answer["model"] == DROP_IN_CLASSIFIER
    usage_ok(answer)
    assert answer["data"] == ok(post(drop_in_url, "/v1/classify", body))["data"]
    want = reference_probabilities(drop_in_paths[2], TEXTS)
    labels = ok(httpx.get(f"{drop_in_url}/models/{DROP_IN_CLASSIFIER}", timeout=30))["labels"]
    for row, probabilities in zip(answer["data"], want, strict=True):
        scores = [item["score"] for item in row]
        assert scores == sorted(scores, reverse=True)  # best label first, as infinity's pipeline
        by_label = {item["label"]: item["score"] for item in row}
        np.testing.assert_allclose([by_label[label] for label in labels], probabilities, atol=1e-5)


def test_the_sentinel_with_two_models_that_classify_is_a_404_naming_them(
    drop_in_url: str,
) -> None:
    # infinity resolves its sentinel only when one model is served; here the reranker and the
    # classifier both answer classify, so the client must name one.
    r = post(drop_in_url, "/classify", {"input": TEXTS, "model": SENTINEL, "raw_scores": False})
    assert r.status_code == 404, r.text
    message = r.json()["error"]["message"]
    assert DROP_IN_RERANKER in message and DROP_IN_CLASSIFIER in message, message


# ----------------------------------------------------------------------------- models, health


def test_models_cards_parse_as_infinitys_model_info(drop_in_url: str) -> None:
    answer = ok(httpx.get(drop_in_url + "/models", timeout=30))
    assert answer["object"] == "list"
    cards = {card["id"]: card for card in answer["data"]}
    assert list(cards) == [DROP_IN_ENCODER, DROP_IN_RERANKER, DROP_IN_CLASSIFIER]
    for name, card in cards.items():
        # ModelInfo.from_dict: id and stats (a dict) required; object / owned_by are enums that
        # take only "model" / "infinity"; capabilities a list of strings.
        assert card["name"] == name and card["object"] == "model"
        assert isinstance(card["stats"], dict) and "owned_by" not in card
        assert isinstance(card["created"], int) and abs(card["created"] - time.time()) < 3600
        assert card["backend"] == "torch"
        assert "routes" in card and "task" in card  # the card's own fields stay
    assert cards[DROP_IN_ENCODER]["capabilities"] == ["embed"]
    assert cards[DROP_IN_RERANKER]["capabilities"] == ["rerank", "classify"]
    assert cards[DROP_IN_CLASSIFIER]["capabilities"] == ["classify"]
    assert "/classify" in cards[DROP_IN_CLASSIFIER]["routes"]


def test_health_answers_infinitys_unix_time(drop_in_url: str) -> None:
    before = time.time()
    r = httpx.get(drop_in_url + "/health", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert set(r.json()) == {"unix"} and before - 1 <= r.json()["unix"] <= time.time() + 1


def test_openapi_lists_both_rerank_bodies_as_one_of_and_classify(drop_in_url: str) -> None:
    schema = ok(httpx.get(drop_in_url + "/openapi.json", timeout=30))
    body = schema["paths"]["/rerank"]["post"]["requestBody"]["content"]["application/json"]
    refs = {option["$ref"].rsplit("/", 1)[1] for option in body["schema"]["oneOf"]}
    assert refs == {"TeiRerankRequest", "RerankRequest"}
    assert refs <= set(schema["components"]["schemas"])
    assert "post" in schema["paths"]["/classify"]
