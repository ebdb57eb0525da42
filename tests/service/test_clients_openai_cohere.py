"""The real ``openai`` and ``cohere`` packages against a running server (issue 43): OpenAI
embeddings (float, base64, ``dimensions``; ``/v1/embeddings`` and ``/embeddings``), Cohere v1
(``Client``: rerank, embed with every input_type and embedding type) and v2 (``ClientV2``: rerank,
embed). Values are checked against sentence-transformers' own ``encode`` (with ``truncate_dim``,
prompts and ``quantize_embeddings`` on the same calibration corpus) and ``CrossEncoder.predict``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import cohere
import httpx
import numpy as np
import pytest
from cohere import EmbedByTypeResponseEmbeddings
from cohere.core.api_error import ApiError
from openai import OpenAI, UnprocessableEntityError
from sentence_transformers import SentenceTransformer, quantize_embeddings

from models.text.quantize import calibration_texts
from tests.utils.live_server import DROP_IN_ENCODER, DROP_IN_RERANKER
from tests.utils.tiny_classifiers import reference_scores
from tests.utils.tiny_encoders import reference_embeddings

TEXTS = ["a short one", "the quick brown fox jumps over the lazy dog", "x", "hello world again"]
QUERY = "what does the fox do"
DIM = 32  # the tiny encoder's embedding size
QUANTIZED = ("int8", "uint8", "binary", "ubinary")
ALL_TYPES = ["float", *QUANTIZED, "base64"]
# Cohere input_type -> the drop-in encoder's prompt it picks (it has "query" and "document").
PROMPT_OF = {
    "search_query": "query",
    "search_document": "document",
    "classification": None,
    "clustering": None,
}


@pytest.fixture(scope="module")
def encoder_folder(drop_in_paths: list[Path]) -> Path:
    return drop_in_paths[0]


@pytest.fixture(scope="module")
def reranker_folder(drop_in_paths: list[Path]) -> Path:
    return drop_in_paths[1]


@pytest.fixture(scope="module")
def openai_client(drop_in_url: str) -> OpenAI:
    return OpenAI(base_url=drop_in_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def co_v1(drop_in_url: str) -> cohere.Client:
    return cohere.Client(api_key="unused", base_url=drop_in_url, max_retries=0)


@pytest.fixture(scope="module")
def co_v2(drop_in_url: str) -> cohere.ClientV2:
    return cohere.ClientV2(api_key="unused", base_url=drop_in_url, max_retries=0)


def _truncated(folder: Path, texts: list[str], k: int) -> np.ndarray:
    """sentence-transformers with ``truncate_dim=k`` and ``normalize_embeddings``."""
    model = SentenceTransformer(str(folder), device="cpu", truncate_dim=k, local_files_only=True)
    return np.asarray(model.encode(texts, normalize_embeddings=True, convert_to_numpy=True))


def _ranges(folder: Path) -> np.ndarray:
    """The per-dimension ranges of sentence-transformers' embeddings of the calibration corpus
    the server calibrates int8/uint8 on (models.text.quantize.calibration_texts)."""
    corpus = reference_embeddings(folder, calibration_texts(), batch_size=64)
    return np.vstack((corpus.min(axis=0), corpus.max(axis=0)))


def _assert_quantized(ours: Any, reference: np.ndarray, precision: str, folder: Path) -> None:
    """``ours`` against ``quantize_embeddings`` of the reference floats: the binary forms
    exactly; the scalar ones within one step (the ranges come from two implementations'
    float32 embeddings, equal to ~1e-7), nearly all exactly."""
    ranges = _ranges(folder) if precision in ("int8", "uint8") else None
    quantized = quantize_embeddings(reference, precision, ranges=ranges)  # type: ignore[arg-type]
    expected = np.asarray(quantized).astype(np.int64)
    got = np.asarray(ours, dtype=np.int64)
    assert got.shape == expected.shape, precision
    if ranges is None:
        np.testing.assert_array_equal(got, expected)
    else:
        assert np.abs(got - expected).max() <= 1, precision
        assert (got == expected).mean() >= 0.98, precision


# ----------------------------------------------------------------------------- OpenAI


def test_openai_float_and_base64_match_sentence_transformers(
    openai_client: OpenAI, encoder_folder: Path
) -> None:
    expected = reference_embeddings(encoder_folder, TEXTS)
    floats = openai_client.embeddings.create(
        model=DROP_IN_ENCODER, input=TEXTS, encoding_format="float"
    )
    # No encoding_format: the client asks for base64 and decodes it itself.
    decoded = openai_client.embeddings.create(model=DROP_IN_ENCODER, input=TEXTS)
    for response in (floats, decoded):
        got = np.array([d.embedding for d in response.data], dtype=np.float32)
        np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("k", [1, 8, 31, DIM])
def test_openai_dimensions_shorten_then_renormalise(
    openai_client: OpenAI, encoder_folder: Path, k: int
) -> None:
    expected = _truncated(encoder_folder, TEXTS, k)
    for fmt in ("float", "base64"):
        response = openai_client.embeddings.create(
            model=DROP_IN_ENCODER, input=TEXTS, dimensions=k, encoding_format=fmt
        )
        if fmt == "float":
            got = np.array([d.embedding for d in response.data], dtype=np.float32)
        else:  # asked for explicitly, the client hands the strings back as they came
            got = np.stack([np.frombuffer(_b64(d.embedding), dtype="<f4") for d in response.data])
        assert got.shape == (len(TEXTS), k)
        np.testing.assert_allclose(got, expected, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def _b64(value: Any) -> bytes:
    assert isinstance(value, str)
    return base64.b64decode(value)


def _by_type(response: Any) -> EmbedByTypeResponseEmbeddings:
    """A by-type answer's ``embeddings`` object (v1 ``embeddings_by_type`` or v2)."""
    assert response.response_type == "embeddings_by_type"
    assert isinstance(response.embeddings, EmbedByTypeResponseEmbeddings)
    return response.embeddings


# 0 is not among them: infinity's client sends dimensions 0 on every request, meaning "the whole
# embedding", and both /embeddings and /v1/embeddings read it so (test_infinity_compat.py).
@pytest.mark.parametrize("k", [DIM + 1, -3])
def test_openai_dimensions_outside_the_range_are_a_422_naming_it(
    openai_client: OpenAI, k: int
) -> None:
    with pytest.raises(UnprocessableEntityError) as caught:
        openai_client.embeddings.create(model=DROP_IN_ENCODER, input=TEXTS, dimensions=k)
    assert f"between 1 and {DIM}" in str(caught.value)


def test_openai_at_embeddings_without_v1(drop_in_url: str, openai_client: OpenAI) -> None:
    # text-embeddings-inference serves OpenAI's route at /embeddings; clients pointed at its
    # root post there.
    bare = OpenAI(base_url=drop_in_url, api_key="unused", max_retries=0)
    got = bare.embeddings.create(model=DROP_IN_ENCODER, input=TEXTS, dimensions=8)
    ref = openai_client.embeddings.create(model=DROP_IN_ENCODER, input=TEXTS, dimensions=8)
    assert [d.embedding for d in got.data] == [d.embedding for d in ref.data]


def test_dimensions_on_encode_and_tei_embed(drop_in_url: str, encoder_folder: Path) -> None:
    expected = _truncated(encoder_folder, TEXTS, 5)
    for path, body in (
        ("/encode", {"inputs": TEXTS, "model": DROP_IN_ENCODER, "dimensions": 5}),
        ("/embed", {"inputs": TEXTS, "dimensions": 5}),
    ):
        r = httpx.post(drop_in_url + path, json=body, timeout=30)
        assert r.status_code == 200, r.text
        got = r.json()["embeddings"] if path == "/encode" else r.json()
        np.testing.assert_allclose(np.array(got, dtype=np.float32), expected, atol=1e-5)


def test_the_card_says_the_range_and_that_the_model_was_not_trained_for_it(
    drop_in_url: str,
) -> None:
    cards = httpx.get(drop_in_url + "/models", timeout=30).json()["data"]
    card = next(c for c in cards if c["name"] == DROP_IN_ENCODER)
    assert card["dimensions"]["min"] == 1 and card["dimensions"]["max"] == DIM
    assert card["dimensions"]["matryoshka"] is False
    assert card["task_prompts"]["query"] == "query"
    assert card["task_prompts"]["document"] == "document"
    assert card["task_prompts"]["classification"] is None
    for route in ("/embeddings", "/v1/embed", "/v2/embed"):
        assert route in card["routes"]


# ----------------------------------------------------------------------------- Cohere v1


def test_cohere_v1_rerank(co_v1: cohere.Client, reranker_folder: Path) -> None:
    expected = reference_scores(reranker_folder, [(QUERY, t) for t in TEXTS])
    response = co_v1.rerank(
        model=DROP_IN_RERANKER, query=QUERY, documents=TEXTS, top_n=3, return_documents=True
    )
    order = np.argsort(-expected, kind="stable")[:3]
    assert [r.index for r in response.results] == list(order)
    for r in response.results:
        assert r.relevance_score == pytest.approx(float(expected[r.index]), abs=1e-5)
        assert r.document is not None and r.document.text == TEXTS[r.index]


@pytest.mark.parametrize("input_type", list(PROMPT_OF))
def test_cohere_v1_embed_floats_use_the_input_types_prompt(
    co_v1: cohere.Client, encoder_folder: Path, input_type: str
) -> None:
    response = co_v1.embed(texts=TEXTS, model=DROP_IN_ENCODER, input_type=input_type)
    assert response.response_type == "embeddings_floats"
    assert response.texts == TEXTS
    assert response.meta is not None and response.meta.billed_units is not None
    assert (response.meta.billed_units.input_tokens or 0) > 0
    expected = reference_embeddings(encoder_folder, TEXTS, prompt_name=PROMPT_OF[input_type])
    np.testing.assert_allclose(np.array(response.embeddings), expected, atol=1e-5)


def test_the_prompts_make_a_difference(co_v1: cohere.Client) -> None:
    # The check above would pass vacuously if the tiny encoder ignored its prompts.
    query = co_v1.embed(texts=TEXTS, model=DROP_IN_ENCODER, input_type="search_query")
    plain = co_v1.embed(texts=TEXTS, model=DROP_IN_ENCODER, input_type="clustering")
    assert not np.allclose(np.array(query.embeddings), np.array(plain.embeddings), atol=1e-3)


def test_cohere_v1_embed_every_type(co_v1: cohere.Client, encoder_folder: Path) -> None:
    response = co_v1.embed(
        texts=TEXTS,
        model=DROP_IN_ENCODER,
        input_type="search_document",
        embedding_types=ALL_TYPES,
    )
    reference = reference_embeddings(encoder_folder, TEXTS, prompt_name="document")
    by_type = _by_type(response)
    np.testing.assert_allclose(np.array(by_type.float_), reference, atol=1e-5)
    assert by_type.base64 is not None
    decoded = np.stack([np.frombuffer(_b64(s), dtype="<f4") for s in by_type.base64])
    np.testing.assert_array_equal(decoded, np.array(by_type.float_, dtype=np.float32))
    for precision in QUANTIZED:
        _assert_quantized(getattr(by_type, precision), reference, precision, encoder_folder)
    assert by_type.binary is not None and len(by_type.binary[0]) == DIM // 8


def test_cohere_v1_embed_one_type_only(co_v1: cohere.Client) -> None:
    response = co_v1.embed(
        texts=TEXTS[:1], model=DROP_IN_ENCODER, input_type="clustering", embedding_types=["int8"]
    )
    by_type = _by_type(response)
    assert by_type.int8 is not None and len(by_type.int8) == 1  # one text: fixed ranges
    assert by_type.float_ is None and by_type.uint8 is None and by_type.binary is None


def test_a_texts_codes_do_not_depend_on_its_neighbours(co_v1: cohere.Client) -> None:
    types = ["int8", "uint8"]
    alone = co_v1.embed(texts=TEXTS[1:2], model=DROP_IN_ENCODER, embedding_types=types)
    batch = co_v1.embed(texts=TEXTS, model=DROP_IN_ENCODER, embedding_types=types)
    one, many = _by_type(alone), _by_type(batch)
    assert one.int8 is not None and many.int8 is not None and one.int8[0] == many.int8[1]
    assert one.uint8 is not None and many.uint8 is not None and one.uint8[0] == many.uint8[1]


def test_cohere_truncate(co_v1: cohere.Client, drop_in_url: str, encoder_folder: Path) -> None:
    long = " ".join(["word"] * 400)
    with pytest.raises(ApiError) as caught:
        co_v1.embed(texts=[long], model=DROP_IN_ENCODER, truncate="NONE")
    assert caught.value.status_code == 422
    end = co_v1.embed(texts=[long, TEXTS[1]], model=DROP_IN_ENCODER, truncate="END")
    # sentence-transformers cuts the end of a long text, as END does.
    expected = reference_embeddings(encoder_folder, [long, TEXTS[1]])
    np.testing.assert_allclose(np.array(end.embeddings), expected, atol=1e-5)
    mixed = long + " " + " ".join(f"w{i}" for i in range(300))
    start = co_v1.embed(texts=[mixed], model=DROP_IN_ENCODER, truncate="START")
    left = httpx.post(
        drop_in_url + "/encode",
        json={"inputs": [mixed], "truncate": True, "truncation_direction": "left"},
        timeout=30,
    ).json()["embeddings"]
    assert np.allclose(np.array(start.embeddings), np.array(left), atol=1e-6)
    cut_end = co_v1.embed(texts=[mixed], model=DROP_IN_ENCODER, truncate="END")
    assert not np.allclose(np.array(start.embeddings), np.array(cut_end.embeddings), atol=1e-3)


def test_cohere_embed_refusals_are_422s(drop_in_url: str) -> None:
    for path, body in (
        ("/v1/embed", {"texts": TEXTS, "input_type": "image"}),
        ("/v1/embed", {"texts": TEXTS, "images": ["data:image/png;base64,AAAA"]}),
        ("/v1/embed", {"texts": TEXTS, "embedding_types": ["int4"]}),
        ("/v2/embed", {"texts": TEXTS, "input_type": "search_query", "max_tokens": 8}),
        ("/v2/embed", {"texts": TEXTS, "input_type": "search_query", "output_dimension": 64}),
    ):
        r = httpx.post(drop_in_url + path, json=body, timeout=30)
        assert r.status_code == 422, (path, body, r.text)
        assert r.json()["error"]["message"]


# ----------------------------------------------------------------------------- Cohere v2


def test_cohere_v2_rerank(co_v2: cohere.ClientV2, reranker_folder: Path) -> None:
    expected = reference_scores(reranker_folder, [(QUERY, t) for t in TEXTS])
    response = co_v2.rerank(model=DROP_IN_RERANKER, query=QUERY, documents=TEXTS, top_n=2)
    assert [r.index for r in response.results] == list(np.argsort(-expected, kind="stable")[:2])
    for r in response.results:
        assert r.relevance_score == pytest.approx(float(expected[r.index]), abs=1e-5)
    assert response.id
    assert response.meta is not None and response.meta.api_version is not None
    assert response.meta.api_version.version == "2"
    everything = co_v2.rerank(
        model=DROP_IN_RERANKER, query=QUERY, documents=TEXTS, max_tokens_per_doc=4096
    )
    assert sorted(r.index for r in everything.results) == list(range(len(TEXTS)))


def test_cohere_v2_rerank_cuts_long_documents_by_default(co_v2: cohere.ClientV2) -> None:
    long = " ".join(["word"] * 400)
    response = co_v2.rerank(model=DROP_IN_RERANKER, query=QUERY, documents=[long, TEXTS[0]])
    assert len(response.results) == 2


@pytest.mark.parametrize("input_type", list(PROMPT_OF))
def test_cohere_v2_embed(co_v2: cohere.ClientV2, encoder_folder: Path, input_type: str) -> None:
    response = co_v2.embed(
        texts=TEXTS, model=DROP_IN_ENCODER, input_type=input_type, embedding_types=ALL_TYPES
    )
    reference = reference_embeddings(encoder_folder, TEXTS, prompt_name=PROMPT_OF[input_type])
    by_type = _by_type(response)
    np.testing.assert_allclose(np.array(by_type.float_), reference, atol=1e-5)
    for precision in QUANTIZED:
        _assert_quantized(getattr(by_type, precision), reference, precision, encoder_folder)
    assert response.texts == TEXTS


def test_cohere_v2_embed_defaults_to_floats(co_v2: cohere.ClientV2, encoder_folder: Path) -> None:
    response = co_v2.embed(texts=TEXTS, model=DROP_IN_ENCODER, input_type="clustering")
    assert response.embeddings.int8 is None
    np.testing.assert_allclose(
        np.array(response.embeddings.float_), reference_embeddings(encoder_folder, TEXTS), atol=1e-5
    )


def test_cohere_v2_output_dimension(co_v2: cohere.ClientV2, encoder_folder: Path) -> None:
    k = 16
    response = co_v2.embed(
        texts=TEXTS,
        model=DROP_IN_ENCODER,
        input_type="clustering",
        output_dimension=k,
        embedding_types=["float", "ubinary"],
    )
    expected = _truncated(encoder_folder, TEXTS, k)
    np.testing.assert_allclose(np.array(response.embeddings.float_), expected, atol=1e-5)
    _assert_quantized(response.embeddings.ubinary, expected, "ubinary", encoder_folder)
