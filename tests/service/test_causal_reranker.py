"""Causal-LM rerankers (a ``CrossEncoder`` with a ``LogitScore`` on a ``*ForCausalLM``) served over
HTTP: ``/v1/rerank``, Cohere's ``/v2/rerank`` and TEI's ``/rerank`` answer with
``CrossEncoder.predict``'s scores, best first, under the backend each request names (its causal
form, or exact attention named in ``x-attention-fallback``); the card says what the score is; and
a folder we cannot run stops start-up with one line naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.attention import BACKENDS, get_backend
from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.helpers import folders_client
from tests.utils.tiny_decoders import RERANK_CHAT_TEMPLATE, save_tiny_causal_reranker

NAME = "tiny-qwen3-reranker"
TOLERANCE = 1e-5  # float32 against sentence-transformers
QUERY = "how do I open a file for reading"
DOCUMENTS = [
    "Use open() with a path and a mode; the file object is a context manager.",
    "x",
    "Return the number of items in a container. " * 6,
    "A list is a mutable sequence of items.",
    "os.path.join joins path components",
]
EXACT = [b for b in BACKENDS if get_backend(b).exact and b in ("flash", "full")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_causal_reranker(tmp_path_factory.mktemp("causal-rerankers") / NAME, "qwen3")


@pytest.fixture(scope="module")
def client(folder: Path) -> Any:
    with folders_client([folder]) as c:
        yield c


@pytest.fixture(scope="module")
def expected(folder: Path) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu")
    scores = model.predict([(QUERY, d) for d in DOCUMENTS], batch_size=2)
    return np.asarray(scores, dtype=np.float64)


def _v1(client: Any, backend: str) -> tuple[Any, list[tuple[int, float]]]:
    body = {"model": NAME, "query": QUERY, "documents": DOCUMENTS, "attention": backend}
    answer = client.post("/v1/rerank", json=body)
    assert answer.status_code == 200, answer.text
    return answer, [(r["index"], r["relevance_score"]) for r in answer.json()["results"]]


def _v2(client: Any, backend: str) -> tuple[Any, list[tuple[int, float]]]:
    body = {"model": NAME, "query": QUERY, "documents": DOCUMENTS, "attention": backend}
    answer = client.post("/v2/rerank", json=body)
    assert answer.status_code == 200, answer.text
    return answer, [(r["index"], r["relevance_score"]) for r in answer.json()["results"]]


def _tei(client: Any, backend: str) -> tuple[Any, list[tuple[int, float]]]:
    body = {"model": NAME, "query": QUERY, "texts": DOCUMENTS, "attention": backend}
    answer = client.post("/rerank", json=body)
    assert answer.status_code == 200, answer.text
    return answer, [(r["index"], r["score"]) for r in answer.json()]


ROUTES = {"/v1/rerank": _v1, "/v2/rerank": _v2, "/rerank": _tei}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("backend", EXACT)
def test_rerank_routes_equal_cross_encoder_predict(
    client: Any, expected: np.ndarray, route: str, backend: str
) -> None:
    answer, ranked = ROUTES[route](client, backend)
    assert answer.headers["x-attention"] == backend
    assert sorted(i for i, _ in ranked) == list(range(len(DOCUMENTS)))
    got = np.full(len(DOCUMENTS), np.nan)
    for i, score in ranked:
        got[i] = score
    assert np.abs(got - expected).max() <= TOLERANCE
    # Best first, in CrossEncoder's order (the scores are far enough apart to order).
    assert [i for i, _ in ranked] == list(np.argsort(-expected, kind="stable"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_answers_in_its_causal_form_or_names_the_fallback(
    client: Any, expected: np.ndarray, backend: str
) -> None:
    answer, ranked = _v1(client, backend)
    assert answer.headers["x-attention"] == backend
    scores = [score for _, score in ranked]
    assert len(scores) == len(DOCUMENTS) and np.isfinite(scores).all()
    fallback = answer.headers.get("x-attention-fallback")
    if get_backend(backend).capabilities.causal:
        assert fallback is None
    else:  # every layer ran exact attention: CrossEncoder's scores
        assert fallback is not None and "no causal" in fallback, fallback
        got = dict(ranked)
        assert max(abs(got[i] - expected[i]) for i in got) <= TOLERANCE


def test_card(client: Any) -> None:
    card = client.get(f"/models/{NAME}").json()
    assert card["task"] == "rerank" and card["output"] == "scores"
    assert card["score"].startswith("LogitScore: log-odds of 'Y'")
    assert card["backbone"].startswith("transformers Qwen3Model")
    assert card["score_activation"] == "sigmoid"
    assert "/v2/rerank" in card["routes"] and "/rerank" in card["routes"]
    no_causal = {b for b in BACKENDS if not get_backend(b).capabilities.causal}
    assert set(card["attention_fallbacks"]) == no_causal


def _refusal(folder: Path) -> str:
    settings = Settings(models=(str(folder),), device="cpu", background_load=False)
    with pytest.raises(ModelLoadError) as caught:
        load_servables(settings, "cpu")
    message = str(caught.value)
    assert message.startswith(f"{folder}: ") and "\n" not in message, message
    return message


def test_a_token_outside_the_vocabulary_stops_start_up(tmp_path: Path) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "bad-token")
    score = folder / "1_LogitScore" / "config.json"
    score.write_text(json.dumps({**json.loads(score.read_text()), "false_token_id": 10**6}))
    assert "LogitScore false_token_id 1000000" in _refusal(folder)


def test_a_backbone_that_is_no_causal_lm_stops_start_up(tmp_path: Path) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "not-causal")
    config = folder / "config.json"
    raw = json.loads(config.read_text())
    config.write_text(json.dumps({**raw, "architectures": ["Qwen3Model"]}))
    assert "causal language model" in _refusal(folder)


def test_a_short_limit_starts_and_truncates_as_cross_encoder(tmp_path: Path) -> None:
    """A limit shorter than the warm-up pairs still starts (warm-up truncates); long pairs are
    cut longest-first as ``CrossEncoder.predict`` cuts them, and ``/predict`` scores a pair as
    ``/v1/rerank`` does."""
    from sentence_transformers import CrossEncoder

    folder = save_tiny_causal_reranker(tmp_path / "short", max_seq_length=32)
    documents = [DOCUMENTS[0] * 4, DOCUMENTS[1]]
    reference = CrossEncoder(str(folder), device="cpu").predict([(QUERY, d) for d in documents])
    with folders_client([folder]) as c:
        body = {"model": "short", "query": QUERY, "documents": documents, "truncate": True}
        answer = c.post("/v1/rerank", json=body)
        assert answer.status_code == 200, answer.text
        got = {r["index"]: r["relevance_score"] for r in answer.json()["results"]}
        assert max(abs(got[i] - float(reference[i])) for i in got) <= TOLERANCE
        predicted = c.post("/predict", json={"model": "short", "inputs": [[QUERY, documents[1]]]})
        assert predicted.status_code == 200, predicted.text
        assert abs(predicted.json()[0][0]["score"] - float(reference[1])) <= TOLERANCE


def test_a_chat_template_reranker_serves_cross_encoder_scores(tmp_path: Path) -> None:
    """Pairs rendered through the tokenizer's chat template (``query`` and ``document``
    messages), on all three routes; long-document windows are refused with the way out."""
    from sentence_transformers import CrossEncoder

    folder = save_tiny_causal_reranker(tmp_path / "chat", chat_template=RERANK_CHAT_TEMPLATE)
    pairs = [(QUERY, d) for d in DOCUMENTS]
    reference = np.asarray(CrossEncoder(str(folder), device="cpu").predict(pairs))
    with folders_client([folder]) as c:
        for route in ROUTES:
            answer = c.post(
                route,
                json={
                    "model": "chat",
                    "query": QUERY,
                    ("texts" if route == "/rerank" else "documents"): DOCUMENTS,
                    "attention": "full",
                },
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            results = body if route == "/rerank" else body["results"]
            key = "score" if route == "/rerank" else "relevance_score"
            got = {r["index"]: r[key] for r in results}
            assert max(abs(got[i] - reference[i]) for i in got) <= TOLERANCE, route
        body = {"model": "chat", "query": QUERY, "documents": DOCUMENTS, "long_text": "windows"}
        refused = c.post("/v1/rerank", json=body)
        assert refused.status_code == 422 and "truncate=true" in refused.text, refused.text
