"""``POST /embed_sparse`` (text-embeddings-inference's route) on SPLADE and inference-free
SPLADE folders: equal to sentence-transformers' ``SparseEncoder.encode`` / ``encode_query`` /
``encode_document`` on the exact backends, ``max_active_dims`` from the request or the folder,
the card's sparse fields, 422s naming ``/embed_sparse`` from the dense routes (and the reverse),
and a bad folder refused at start-up in one line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from models.attention import BACKENDS, get_backend
from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.helpers import folders_client
from tests.utils.tiny_encoders import SAMPLE_TEXTS, save_tiny_encoder
from tests.utils.tiny_sparse import (
    dense_of,
    reference_vectors,
    save_tiny_inference_free,
    save_tiny_splade,
)

TOLERANCE = 1e-5  # float32, the bound against sentence-transformers
EXACT = [b for b in BACKENDS if get_backend(b).exact and b in ("flash", "full")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sparse-service")
    return {
        "splade": save_tiny_splade(root / "splade", "bert", max_active_dims=16),
        "free": save_tiny_inference_free(root / "free", "distilbert", seed=2),
        "dense": save_tiny_encoder(root / "dense", "bert", layers=1),
    }


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]) -> Iterator[Any]:
    with folders_client(folders.values()) as c:
        yield c


def _post(client: Any, **body: Any) -> list[Any]:
    r = client.post("/embed_sparse", json={"inputs": SAMPLE_TEXTS, "truncate": True, **body})
    assert r.status_code == 200, r.text
    answer: list[Any] = r.json()
    for entries in answer:
        indices = [e["index"] for e in entries]
        assert indices == sorted(indices) and all(e["value"] != 0 for e in entries)
    return answer


def _same(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert torch.equal(got != 0, expected != 0), "different non-zero entries"
    assert (got - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("top", [None, 5])
def test_embed_sparse_equals_sentence_transformers(
    client: Any, folders: dict[str, Path], backend: str, top: int | None
) -> None:
    answer = _post(client, model="splade", attention=backend, max_active_dims=top)
    expected = reference_vectors(folders["splade"], SAMPLE_TEXTS, max_active_dims=top)
    _same(dense_of(answer, expected.shape[1]), expected)
    assert max(len(e) for e in answer) == (top or 16)  # the request's, else the folder's


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("task", [None, "query", "document"])
def test_the_task_routes_an_inference_free_model(
    client: Any, folders: dict[str, Path], backend: str, task: str | None
) -> None:
    answer = _post(client, model="free", attention=backend, input_type=task)
    expected = reference_vectors(folders["free"], SAMPLE_TEXTS, task=task)
    _same(dense_of(answer, expected.shape[1]), expected)


def test_the_card_says_sparse(client: Any) -> None:
    card = client.get("/models/free").json()
    assert card["task"] == "sparse" and card["output"] == "sparse"
    assert card["routes"][0] == "/embed_sparse" and "/embed" not in card["routes"]
    assert card["sparse"]["vocab_size"] == card["dim"]
    assert card["sparse"]["pooling_strategy"] == "max"
    assert card["sparse"]["routes"]["query"].startswith("SparseStaticEmbedding")
    assert client.get("/models/splade").json()["sparse"]["max_active_dims"] == 16


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/encode", {"inputs": ["a text"]}),
        ("/embed", {"inputs": ["a text"]}),
        ("/v1/embeddings", {"input": ["a text"]}),
        ("/v1/embed", {"texts": ["a text"]}),
        ("/v2/embed", {"texts": ["a text"], "embedding_types": ["float"]}),
    ],
)
def test_a_dense_route_on_a_sparse_model_names_embed_sparse(
    client: Any, route: str, body: dict[str, Any]
) -> None:
    r = client.post(route, json={**body, "model": "splade"})
    assert r.status_code == 422, r.text
    assert "/embed_sparse" in r.json()["error"]["message"]


def test_embed_sparse_on_a_dense_model_is_refused(client: Any) -> None:
    r = client.post("/embed_sparse", json={"inputs": ["a text"], "model": "dense"})
    assert r.status_code == 422, r.text
    assert "not a sparse encoder" in r.json()["error"]["message"]


def test_bad_requests_say_what_is_wrong(client: Any) -> None:
    r = client.post(
        "/embed_sparse", json={"inputs": ["a"], "model": "splade", "max_active_dims": 0}
    )
    assert r.status_code == 422 and "max_active_dims" in r.text
    long = {"inputs": ["a " * 200], "model": "splade", "truncate": False}  # none: auto_truncate
    r = client.post("/embed_sparse", json=long)
    assert r.status_code == 422 and "truncate" in r.json()["error"]["message"]


def test_a_bad_folder_stops_start_up_in_one_line(folders: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(folders["splade"], broken)
    (broken / "1_SpladePooling" / "config.json").write_text(
        json.dumps({"pooling_strategy": "mean"})
    )
    settings = Settings(models=(str(broken),), device="cpu", background_load=False)
    with pytest.raises(ModelLoadError) as caught:
        load_servables(settings, "cpu")
    message = str(caught.value)
    assert message.startswith(f"{broken}: ") and "\n" not in message, message
    assert "pooling_strategy 'mean'" in message


def test_post_root_answers_as_embed_sparse(client: Any) -> None:
    body = {"inputs": ["a text", "another one"], "model": "splade"}
    r = client.post("/", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == client.post("/embed_sparse", json=body).json()
    assert client.post("/tokenize", json={"inputs": "a text", "model": "splade"}).status_code == 200


@pytest.mark.parametrize("backend", [*BACKENDS, "auto"])
def test_every_backend_serves_embed_sparse(client: Any, backend: str) -> None:
    body = {"model": "splade", "inputs": ["a text", "a longer text to pad"], "attention": backend}
    r = client.post("/embed_sparse", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-attention"] == ("flash" if backend == "auto" else backend)
    assert all(len(entries) == 16 for entries in r.json())  # the folder's max_active_dims
