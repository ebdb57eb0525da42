"""The text-embeddings-inference clients people run, pointed at a real server (issue 43):
huggingface_hub's ``InferenceClient`` (every call TEI answers), LangChain's
``HuggingFaceEndpointEmbeddings`` and LlamaIndex's TEI embedding and rerank integrations. Each
answer is compared with what this server's own routes give for the same texts.

The server (``drop_in_url``) serves an encoder (the default model: first loaded), a reranker and
a three-label classifier; the clients send TEI's bodies to ``/``, ``/embed``, ``/rerank``,
``/info`` and ``/health``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest

from tests.utils.live_server import DROP_IN_CLASSIFIER, DROP_IN_ENCODER, DROP_IN_RERANKER

TEXTS = ["the first text", "a second, somewhat longer text about something else", "x"]
LONG = " ".join(f"word{i}" for i in range(100))  # over the encoder's 64 tokens


@pytest.fixture(autouse=True)
def hub_client_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs with ``HF_HUB_OFFLINE=1`` (tests/conftest.py), under which huggingface_hub
    refuses every request, a loopback server's too; these tests lift that for their own calls,
    each of which names the loopback server (no Hub model is ever asked for)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)


def post(url: str, path: str, **body: Any) -> Any:
    r = httpx.post(url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def embedded(url: str, texts: list[str], **fields: Any) -> np.ndarray:
    """This server's ``/encode`` of ``texts`` (normalised unless told otherwise, as TEI)."""
    fields.setdefault("normalize", True)
    found = post(url, "/encode", inputs=texts, model=DROP_IN_ENCODER, **fields)["embeddings"]
    return np.array(found, dtype=np.float32)


# ----------------------------------------------------------------------------- huggingface_hub


def test_inference_client_feature_extraction(drop_in_url: str) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=drop_in_url)
    got = client.feature_extraction(TEXTS)
    np.testing.assert_allclose(got, embedded(drop_in_url, TEXTS), atol=1e-6)
    one = client.feature_extraction("the first text")
    np.testing.assert_allclose(one, embedded(drop_in_url, TEXTS[:1]), atol=1e-6)
    raw = client.feature_extraction(TEXTS, normalize=False)
    np.testing.assert_allclose(raw, embedded(drop_in_url, TEXTS, normalize=False), atol=1e-6)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    prompted = client.feature_extraction(TEXTS, prompt_name="query")
    expected = embedded(drop_in_url, TEXTS, prompt_name="query")
    np.testing.assert_allclose(prompted, expected, atol=1e-6)
    assert not np.allclose(prompted, got, atol=1e-3)
    cut = client.feature_extraction([LONG], truncate=True, truncation_direction="left")
    expected = embedded(drop_in_url, [LONG], truncate=True, truncation_direction="left")
    np.testing.assert_allclose(cut, expected, atol=1e-6)


def test_inference_client_errors_are_clean_http_errors(drop_in_url: str) -> None:
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    client = InferenceClient(base_url=drop_in_url)
    with pytest.raises(HfHubHTTPError) as too_long:  # auto_truncate (on) cuts one without
        client.feature_extraction([LONG], truncate=False)
    assert too_long.value.response.status_code == 422
    assert "truncate" in too_long.value.response.json()["error"]["message"]
    unknown = InferenceClient(base_url=drop_in_url, headers={"x-model": "nope"})
    with pytest.raises(HfHubHTTPError) as missing:
        unknown.feature_extraction("a")
    assert missing.value.response.status_code == 404


def test_inference_client_sentence_similarity(drop_in_url: str) -> None:
    from huggingface_hub import InferenceClient

    scores = InferenceClient(base_url=drop_in_url).sentence_similarity(
        "the source sentence", other_sentences=TEXTS
    )
    vectors = embedded(drop_in_url, ["the source sentence", *TEXTS])
    np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-5)


def test_inference_client_text_classification(drop_in_url: str) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=drop_in_url, headers={"x-model": DROP_IN_CLASSIFIER})
    predicted = post(drop_in_url, "/predict", inputs="I like you.", model=DROP_IN_CLASSIFIER)
    # TEI answers one text with a flat list of labels, best first; the client, written for the
    # Inference API's [[...]], keeps its first element (against TEI too): the best label, not
    # the list its annotation promises (huggingface/huggingface_hub#3539).
    best: Any = client.text_classification("I like you.")
    assert (best.label, best.score) == (predicted[0]["label"], pytest.approx(predicted[0]["score"]))
    also: Any = client.text_classification("I like you.", top_k=1, function_to_apply="none")
    assert also.label == best.label  # parameters are accepted and ignored, as TEI does


def test_inference_client_endpoint_info_and_health(drop_in_url: str) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=drop_in_url, provider="hf-inference")
    info = client.get_endpoint_info()
    assert info["model_id"] == DROP_IN_ENCODER
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert client.health_check() is True


def test_async_inference_client(drop_in_url: str) -> None:
    from huggingface_hub import AsyncInferenceClient

    async def run() -> Any:
        client = AsyncInferenceClient(base_url=drop_in_url)
        return await asyncio.gather(
            client.feature_extraction(TEXTS),
            client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:]),
        )

    vectors, scores = asyncio.run(run())
    expected = embedded(drop_in_url, TEXTS)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    np.testing.assert_allclose(scores, expected[1:] @ expected[0], atol=1e-5)


# ----------------------------------------------------------------------------- LangChain


def test_langchain_endpoint_embeddings(drop_in_url: str) -> None:
    from huggingface_hub import AsyncInferenceClient, InferenceClient
    from langchain_huggingface import HuggingFaceEndpointEmbeddings

    # langchain-huggingface 1.x refuses a URL as model (langchain-ai/docs#4364) and builds a
    # Hub client; handing it clients for the server is the way left to reach a TEI server.
    embeddings = HuggingFaceEndpointEmbeddings(model=DROP_IN_ENCODER)
    embeddings.client = InferenceClient(base_url=drop_in_url)
    embeddings.async_client = AsyncInferenceClient(base_url=drop_in_url)
    expected = embedded(drop_in_url, TEXTS)
    np.testing.assert_allclose(embeddings.embed_documents(TEXTS), expected, atol=1e-6)
    np.testing.assert_allclose(embeddings.embed_query(TEXTS[1]), expected[1], atol=1e-6)
    documents = asyncio.run(embeddings.aembed_documents(TEXTS))
    np.testing.assert_allclose(documents, expected, atol=1e-6)


# ----------------------------------------------------------------------------- LlamaIndex


def test_llama_index_tei_embeddings(drop_in_url: str) -> None:
    from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference

    model = TextEmbeddingsInference(model_name=DROP_IN_ENCODER, base_url=drop_in_url)
    expected = embedded(drop_in_url, TEXTS, truncate=True)  # it sends truncate: true
    np.testing.assert_allclose(model.get_text_embedding(TEXTS[0]), expected[0], atol=1e-6)
    np.testing.assert_allclose(model.get_query_embedding(TEXTS[1]), expected[1], atol=1e-6)
    np.testing.assert_allclose(model.get_text_embedding_batch(TEXTS), expected, atol=1e-6)
    batch = asyncio.run(model.aget_text_embedding_batch(TEXTS))
    np.testing.assert_allclose(batch, expected, atol=1e-6)
    one = asyncio.run(model.aget_text_embedding(TEXTS[2]))
    np.testing.assert_allclose(one, expected[2], atol=1e-6)
    long = model.get_text_embedding(LONG)  # truncate: true cuts it rather than refusing it
    np.testing.assert_allclose(long, embedded(drop_in_url, [LONG], truncate=True)[0], atol=1e-6)
    # Its endpoint setting pointed at POST / reaches the same encoder.
    root = TextEmbeddingsInference(model_name=DROP_IN_ENCODER, base_url=drop_in_url, endpoint="/")
    np.testing.assert_allclose(root.get_text_embedding_batch(TEXTS), expected, atol=1e-6)


def test_llama_index_tei_rerank(drop_in_url: str) -> None:
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.postprocessor.tei_rerank import TextEmbeddingInference

    query = "what is the second text about"
    scored = post(drop_in_url, "/rerank", query=query, texts=TEXTS, model=DROP_IN_RERANKER)
    expected = {TEXTS[r["index"]]: r["score"] for r in scored}
    reranker = TextEmbeddingInference(base_url=drop_in_url, top_n=2)
    nodes = [NodeWithScore(node=TextNode(text=t), score=0.0) for t in TEXTS]
    ranked = reranker.postprocess_nodes(nodes, QueryBundle(query))
    assert [n.node.get_content() for n in ranked] == [TEXTS[r["index"]] for r in scored[:2]]
    for node in ranked:
        assert node.score == pytest.approx(expected[node.node.get_content()], abs=1e-6)
