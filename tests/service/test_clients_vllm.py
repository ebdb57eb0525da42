"""vLLM's pooling API against a running server: vLLM's documented bodies sent through the real
``openai`` package (``client.post`` to ``/pooling``, ``/score``, ``/rerank``, ``/classify``;
``client.embeddings.create(extra_body=...)`` at ``/vllm/v1``) and plain httpx, the answers
compared with sentence-transformers' ``SentenceTransformer.encode`` / ``CrossEncoder.predict``
and transformers' softmax on the drop-in folders. The shared paths keep the peers' answers for
the peers' bodies (the rule in :mod:`service.http.routes.vllm.shared`)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from openai import OpenAI
from sentence_transformers import SentenceTransformer

from tests.utils.live_server import DROP_IN_CLASSIFIER, DROP_IN_ENCODER, DROP_IN_RERANKER
from tests.utils.tiny_classifiers import reference_probabilities, reference_scores
from tests.utils.tiny_encoders import min_cosine, reference_embeddings

TEXTS = ["a short one", "the quick brown fox jumps over the lazy dog", "x"]
QUERY = "what does the fox do"
LONG = "word " * 400  # over the tiny models' token limit


@pytest.fixture(scope="module")
def client(drop_in_url: str) -> OpenAI:
    return OpenAI(base_url=drop_in_url, api_key="unused", max_retries=0)


def post(url: str, path: str, **body: Any) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60)


def vpost(client: OpenAI, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's documented way to call its pooling routes with the OpenAI SDK."""
    out: dict[str, Any] = client.post(path, body=body, cast_to=httpx.Response).json()
    return out


# ----------------------------------------------------------------------------- /pooling


def test_pooling_embed_matches_sentence_transformers(
    client: OpenAI, drop_in_paths: list[Path]
) -> None:
    out = vpost(client, "/pooling", {"model": DROP_IN_ENCODER, "input": TEXTS, "task": "embed"})
    assert out["object"] == "list" and out["id"].startswith("pool-")
    assert [d["index"] for d in out["data"]] == [0, 1, 2]
    assert {d["object"] for d in out["data"]} == {"pooling"}
    assert out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] > 0
    ours = np.array([d["data"] for d in out["data"]])
    assert min_cosine(ours, reference_embeddings(drop_in_paths[0], TEXTS)) > 0.9999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_pooling_use_activation_false_gives_the_unnormalised_embedding(
    client: OpenAI, drop_in_paths: list[Path]
) -> None:
    body = {"model": DROP_IN_ENCODER, "input": TEXTS, "use_activation": False}
    ours = np.array([d["data"] for d in vpost(client, "/pooling", body)["data"]])
    st = SentenceTransformer(str(drop_in_paths[0]), device="cpu", local_files_only=True)
    # The folder's modules without its Normalize: the pooled, unscaled embedding.
    unscaled = SentenceTransformer(modules=[st[0], st[1]], device="cpu")
    reference = unscaled.encode(TEXTS, batch_size=1)
    assert np.allclose(ours, reference, atol=1e-4)
    assert not np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-3)


def test_pooling_dimensions_and_base64(client: OpenAI, drop_in_paths: list[Path]) -> None:
    st = SentenceTransformer(
        str(drop_in_paths[0]), device="cpu", truncate_dim=8, local_files_only=True
    )
    reference = st.encode(TEXTS, normalize_embeddings=True)
    for endianness, dtype in (("little", "<f4"), ("big", ">f4")):
        body = {
            "model": DROP_IN_ENCODER,
            "input": TEXTS,
            "dimensions": 8,
            "encoding_format": "base64",
            "endianness": endianness,
        }
        out = vpost(client, "/pooling", body)
        ours = np.array(
            [np.frombuffer(base64.b64decode(d["data"]), dtype=dtype) for d in out["data"]]
        )
        assert ours.shape == (3, 8) and min_cosine(ours, reference) > 0.9999


def test_pooling_token_embed_matches_token_embeddings(
    client: OpenAI, drop_in_paths: list[Path]
) -> None:
    st = SentenceTransformer(str(drop_in_paths[0]), device="cpu", local_files_only=True)
    tokens = st.encode(TEXTS[:2], output_value="token_embeddings", batch_size=1)
    for activation in (None, False):
        body: dict[str, Any] = {"model": DROP_IN_ENCODER, "input": TEXTS[:2], "task": "token_embed"}
        if activation is not None:
            body["use_activation"] = activation
        out = vpost(client, "/pooling", body)
        for row, reference in zip(out["data"], tokens, strict=True):
            ref = reference.numpy()
            if activation is None:  # each token's vector at unit length
                ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
            assert np.allclose(np.array(row["data"]), ref, atol=1e-4)


def test_pooling_classify_matches_the_softmax(client: OpenAI, drop_in_paths: list[Path]) -> None:
    out = vpost(client, "/pooling", {"model": DROP_IN_CLASSIFIER, "input": TEXTS})  # its task
    ours = np.array([d["data"] for d in out["data"]])
    assert np.allclose(ours, reference_probabilities(drop_in_paths[2], TEXTS), atol=1e-5)


def test_openai_sdk_embeddings_with_vllm_extra_fields(
    drop_in_url: str, drop_in_paths: list[Path]
) -> None:
    sdk = OpenAI(base_url=drop_in_url + "/vllm/v1", api_key="unused", max_retries=0)
    extra = {"truncate_prompt_tokens": -1, "priority": -1, "use_activation": True}
    got = sdk.embeddings.create(model=DROP_IN_ENCODER, input=[*TEXTS, LONG], extra_body=extra)
    ours = np.array([d.embedding for d in got.data])
    st = SentenceTransformer(str(drop_in_paths[0]), device="cpu", local_files_only=True)
    assert min_cosine(ours, st.encode([*TEXTS, LONG])) > 0.9999  # LONG cut as ST cuts it


# ----------------------------------------------------------------------------- score / rerank


def test_score_one_to_n_and_n_to_n_match_cross_encoder(
    client: OpenAI, drop_in_paths: list[Path]
) -> None:
    pairs = [(QUERY, t) for t in TEXTS]
    reference = reference_scores(drop_in_paths[1], pairs)
    for path in ("/score", "/v1/score"):
        out = vpost(client, path, {"model": DROP_IN_RERANKER, "text_1": QUERY, "text_2": TEXTS})
        assert out["object"] == "list" and [d["object"] for d in out["data"]] == ["score"] * 3
        assert np.allclose([d["score"] for d in out["data"]], reference, atol=1e-5)
    body = {"model": DROP_IN_RERANKER, "queries": [QUERY] * 3, "documents": TEXTS}
    out = vpost(client, "/score", body)
    assert np.allclose([d["score"] for d in out["data"]], reference, atol=1e-5)


def test_score_use_activation_false_is_the_logit(client: OpenAI, drop_in_paths: list[Path]) -> None:
    body = {"model": DROP_IN_RERANKER, "text_1": QUERY, "text_2": TEXTS, "use_activation": False}
    logits = np.array([d["score"] for d in vpost(client, "/score", body)["data"]])
    reference = reference_scores(drop_in_paths[1], [(QUERY, t) for t in TEXTS])
    assert np.allclose(1 / (1 + np.exp(-logits)), reference, atol=1e-5)


def test_score_with_an_embedding_model_is_the_cosine(
    client: OpenAI, drop_in_paths: list[Path]
) -> None:
    out = vpost(client, "/score", {"model": DROP_IN_ENCODER, "text_1": QUERY, "text_2": TEXTS})
    vectors = reference_embeddings(drop_in_paths[0], [QUERY, *TEXTS])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert np.allclose([d["score"] for d in out["data"]], unit[1:] @ unit[0], atol=1e-5)


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank", "/vllm/rerank"])
def test_vllm_rerank_answer_on_every_rerank_path(
    client: OpenAI, drop_in_paths: list[Path], path: str
) -> None:
    reference = reference_scores(drop_in_paths[1], [(QUERY, t) for t in TEXTS])
    body = {"model": DROP_IN_RERANKER, "query": QUERY, "documents": TEXTS, "top_n": 0}
    body["use_activation"] = True  # a vLLM marker on every shared path
    out = vpost(client, path, body)
    assert set(out) == {"id", "model", "usage", "results"}
    order = [int(i) for i in np.argsort(-reference, kind="stable")]
    assert [r["index"] for r in out["results"]] == order
    assert [r["document"]["text"] for r in out["results"]] == [TEXTS[i] for i in order]
    assert np.allclose([r["relevance_score"] for r in out["results"]], reference[order], atol=1e-5)
    two = vpost(client, path, {**body, "top_n": 2})
    assert [r["index"] for r in two["results"]] == order[:2]


def test_shared_rerank_paths_keep_the_peers_answers(drop_in_url: str) -> None:
    body = {"model": DROP_IN_RERANKER, "query": QUERY, "documents": TEXTS}
    jina = post(drop_in_url, "/v1/rerank", **body).json()
    assert jina["object"] == "rerank" and "document" not in jina["results"][0]
    infinity = post(drop_in_url, "/rerank", **body, return_documents=True).json()
    assert isinstance(infinity["results"][0]["document"], str) and "created" in infinity
    tei = post(drop_in_url, "/rerank", query=QUERY, texts=TEXTS, model=DROP_IN_RERANKER).json()
    assert isinstance(tei, list) and set(tei[0]) == {"index", "score"}
    cohere = post(drop_in_url, "/v2/rerank", **body, priority=3).json()
    assert "meta" in cohere
    # vLLM's top_n: 0 ("all") alone is no marker: the peers' 422 stays.
    assert post(drop_in_url, "/v1/rerank", **body, top_n=0).status_code == 422
    peer_error = post(drop_in_url, "/v1/rerank", **body, bogus=1)
    assert peer_error.status_code == 422 and "bogus" in peer_error.text


# ----------------------------------------------------------------------------- classify


def test_classify_vllm_answer_under_a_marker_and_under_vllm(
    client: OpenAI, drop_in_paths: list[Path]
) -> None:
    reference = reference_probabilities(drop_in_paths[2], TEXTS)
    for path, body in (
        ("/classify", {"model": DROP_IN_CLASSIFIER, "input": TEXTS, "priority": 0}),
        ("/vllm/classify", {"model": DROP_IN_CLASSIFIER, "input": TEXTS}),
    ):
        out = vpost(client, path, body)
        assert out["object"] == "list" and out["id"].startswith("classify-")
        assert set(out["data"][0]) == {"index", "label", "probs", "num_classes"}
        assert np.allclose([d["probs"] for d in out["data"]], reference, atol=1e-5)
        labels = [f"label_{chr(97 + int(i))}" for i in reference.argmax(axis=1)]
        assert [d["label"] for d in out["data"]] == labels
        assert {d["num_classes"] for d in out["data"]} == {3}


def test_classify_peer_body_keeps_infinitys_answer(drop_in_url: str) -> None:
    out = post(drop_in_url, "/classify", model=DROP_IN_CLASSIFIER, input=TEXTS).json()
    assert out["object"] == "classify" and isinstance(out["data"][0], list)


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("path", "extra", "needle"),
    [
        ("/pooling", {"embed_dtype": "float16"}, "embed_dtype"),
        ("/pooling", {"encoding_format": "bytes"}, "encoding_format"),
        ("/pooling", {"padding": "max_length"}, "padding"),
        ("/pooling", {"add_special_tokens": False}, "add_special_tokens"),
        ("/pooling", {"messages": [{"role": "user", "content": "hi"}]}, "messages"),
        ("/pooling", {"task": "token_classify"}, "token_classify"),
        ("/pooling", {"normalize": True}, "normalize"),
        ("/pooling", {"truncate_prompt_tokens": 5}, "truncate_prompt_tokens"),
        ("/pooling", {"truncate_prompt_tokens": 10**6}, "truncate_prompt_tokens"),
        ("/pooling", {"input": [1, 2, 3]}, "token ids"),
        ("/pooling", {"task": "token_embed", "dimensions": 4}, "dimensions"),
        ("/pooling", {"task": "token_embed", "encoding_format": "base64"}, "encoding_format"),
    ],
)
def test_unserved_vllm_fields_are_a_422_naming_them(
    drop_in_url: str, path: str, extra: dict[str, Any], needle: str
) -> None:
    r = post(drop_in_url, path, **{"model": DROP_IN_ENCODER, "input": TEXTS, **extra})
    assert r.status_code == 422, r.text
    assert set(r.json()) == {"error"} and needle in r.json()["error"]["message"]


def test_bad_score_and_rerank_bodies_are_4xx_json(drop_in_url: str) -> None:
    bad = [
        ("/score", {"model": DROP_IN_RERANKER, "text_1": ["a", "b"], "text_2": ["c", "d", "e"]}),
        ("/score", {"model": DROP_IN_RERANKER, "text_1": "a"}),
        ("/score", {"model": DROP_IN_RERANKER, "text_1": "a", "documents": ["b"]}),
        ("/rerank", {"model": DROP_IN_RERANKER, "query": "a", "documents": [LONG], "user": "u"}),
        (
            "/vllm/rerank",
            {"model": DROP_IN_RERANKER, "query": "a", "documents": ["b"], "top_n": -1},
        ),
    ]
    for path, body in bad:
        r = post(drop_in_url, path, **body)
        assert 400 <= r.status_code < 500 and "error" in r.json(), (path, r.text)
    cut = post(
        drop_in_url,
        "/vllm/rerank",
        model=DROP_IN_RERANKER,
        query="a",
        documents=[LONG],
        truncate_prompt_tokens=-1,
    )
    assert cut.status_code == 200, cut.text
