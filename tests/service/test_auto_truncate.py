"""The ``auto_truncate`` setting (on by default, as text-embeddings-inference >= 1.9's
``--auto-truncate``): on TEI's routes a body that leaves ``truncate`` out (or sends null) cuts
over-long texts; ``truncate: false`` still refuses them and ``truncate: true`` always cuts, as
TEI's ``req.truncate.unwrap_or(info.auto_truncate)`` reads them. With the setting off, the old
rule: no ``truncate``, a 422. The other peers' routes keep their own rule.

References: sentence-transformers' own ``encode`` (which truncates at the model's
``max_seq_length``), the route's explicit ``truncate: true`` answer, and huggingface_hub's
``InferenceClient`` against a real server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.helpers import assert_error, folders_app, folders_client
from tests.utils.live_server import DROP_IN_ENCODER, serving
from tests.utils.tiny_sparse import save_tiny_splade

LONG = " ".join(f"word{i}" for i in range(100))  # over the tiny models' 64 tokens
SHORT = "a short text"

# Each TEI route with a body holding one over-long text and no truncate field.
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/embed", {"inputs": [LONG, SHORT]}),
    ("/embed_all", {"inputs": LONG}),
    ("/embed_sparse", {"inputs": [LONG]}),
    ("/rerank", {"query": "a query", "texts": [SHORT, LONG]}),
    ("/predict", {"inputs": [[SHORT, LONG]]}),
    ("/similarity", {"inputs": {"source_sentence": LONG, "sentences": [SHORT, LONG]}}),
    ("/", {"inputs": LONG}),  # the default text model: the encoder, so /embed's answer
    ("/invocations", {"inputs": [LONG]}),
]


def with_truncate(path: str, body: dict[str, Any], value: bool | None) -> dict[str, Any]:
    """``body`` with TEI's ``truncate`` set to ``value`` where its route reads it."""
    if path == "/similarity":
        return {**body, "parameters": {"truncate": value}}
    return {**body, "truncate": value}


@pytest.fixture(scope="module")
def folders(drop_in_paths: list[Path], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The drop-in encoder (first: the default of /, /embed, /similarity), reranker and
    classifier, and a SPLADE model for /embed_sparse."""
    splade = save_tiny_splade(tmp_path_factory.mktemp("auto-truncate") / "tiny-splade")
    return [*drop_in_paths, splade]


@pytest.fixture(scope="module")
def on(folders: list[Path]) -> Iterator[TestClient]:
    """The default settings: auto_truncate on."""
    with folders_client(folders) as client:
        yield client


@pytest.fixture(scope="module")
def off(folders: list[Path]) -> Iterator[TestClient]:
    """auto_truncate off: TEI before 1.9 (and this server before the setting)."""
    with folders_client(folders, auto_truncate=False) as client:
        yield client


def test_the_setting_is_on_by_default_and_read_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().auto_truncate is True
    monkeypatch.setenv("ATTNSERVE_AUTO_TRUNCATE", "false")
    assert Settings().auto_truncate is False


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[p for p, _ in ROUTES])
def test_teis_routes_cut_a_body_without_truncate_as_with_truncate_true(
    on: TestClient, path: str, body: dict[str, Any]
) -> None:
    cut = on.post(path, json=with_truncate(path, body, True))
    assert cut.status_code == 200, cut.text
    for sent in (body, with_truncate(path, body, None)):  # absent, or null: the setting
        r = on.post(path, json=sent)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(values(r.json()), values(cut.json()), atol=1e-6)
    refused = on.post(path, json=with_truncate(path, body, False))
    assert_error(refused, 422, "invalid_request", "truncate")


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[p for p, _ in ROUTES])
def test_with_the_setting_off_a_body_without_truncate_is_refused(
    off: TestClient, path: str, body: dict[str, Any]
) -> None:
    for sent in (body, with_truncate(path, body, None), with_truncate(path, body, False)):
        assert_error(off.post(path, json=sent), 422, "invalid_request", "truncate")
    assert off.post(path, json=with_truncate(path, body, True)).status_code == 200


def test_embed_cuts_as_sentence_transformers_does(on: TestClient, folders: list[Path]) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folders[0]), device="cpu", local_files_only=True)
    expected = model.encode([LONG, SHORT], normalize_embeddings=True)
    r = on.post("/embed", json={"inputs": [LONG, SHORT]})
    np.testing.assert_allclose(r.json(), expected, atol=1e-5)


def test_info_says_the_setting(on: TestClient, off: TestClient) -> None:
    assert on.get("/info").json()["auto_truncate"] is True
    assert off.get("/info").json()["auto_truncate"] is False


def test_long_text_and_the_other_peers_routes_keep_their_own_rule(on: TestClient) -> None:
    # /embed's long_text extension says for itself; /encode and OpenAI's /v1/embeddings refuse.
    windows = on.post("/embed", json={"inputs": [LONG], "long_text": "windows"})
    cut = on.post("/embed", json={"inputs": [LONG]})
    assert windows.status_code == 200 and not np.allclose(windows.json(), cut.json(), atol=1e-4)
    r = on.post("/encode", json={"inputs": [LONG], "model": DROP_IN_ENCODER})
    assert_error(r, 422, "invalid_request", "truncate")
    r = on.post("/v1/embeddings", json={"input": [LONG], "model": DROP_IN_ENCODER})
    assert r.status_code == 422, r.text


def values(answer: Any) -> np.ndarray:
    """The numbers of any TEI answer (vectors, token vectors, scores, label scores, sparse
    entries), flattened in order."""
    out: list[float] = []

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for key in sorted(item):
                walk(item[key])
        elif isinstance(item, list):
            for x in item:
                walk(x)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            out.append(float(item))

    walk(answer)
    return np.array(out)


# ----------------------------------------------------------------------------- huggingface_hub


@pytest.fixture
def hub_client_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lift ``HF_HUB_OFFLINE`` for calls that name the loopback server (as test_clients_tei)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)


@pytest.mark.usefixtures("hub_client_requests")
def test_inference_client_gets_an_over_long_text_cut(
    drop_in_url: str, drop_in_paths: list[Path]
) -> None:
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError
    from sentence_transformers import SentenceTransformer

    client = InferenceClient(base_url=drop_in_url)
    model = SentenceTransformer(str(drop_in_paths[0]), device="cpu", local_files_only=True)
    got = client.feature_extraction([LONG])  # TEI's client sends no truncate by default
    np.testing.assert_allclose(got, model.encode([LONG], normalize_embeddings=True), atol=1e-5)
    scores = client.sentence_similarity(LONG, other_sentences=[SHORT, LONG])
    assert len(scores) == 2 and scores[1] == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(HfHubHTTPError) as refused:
        client.feature_extraction([LONG], truncate=False)
    assert refused.value.response.status_code == 422
    # The server started with auto_truncate off: the client's default body is refused.
    with serving(folders_app(drop_in_paths[:1], auto_truncate=False)) as url:
        with pytest.raises(HfHubHTTPError) as off:
            InferenceClient(base_url=url).feature_extraction([LONG])
        assert off.value.response.status_code == 422
        assert "truncate" in off.value.response.json()["error"]["message"]
