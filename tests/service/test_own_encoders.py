"""A user's own text models, served from their folders: every supported architecture through
HTTP against sentence-transformers' own ``encode``, pooling and prompts as configured, every
backend run or refused by name, and broken folders stopping start-up with one line.

The models are tiny and random (``tests/utils/tiny_encoders.py``), built with transformers' own
classes and saved by ``SentenceTransformer.save``, so the reference is the real library.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from models.attention import BACKENDS, get_backend
from models.quality_file import backends_of, read_quality
from service.app import create_app
from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.helpers import folders_client
from tests.utils.tiny_encoders import (
    ARCHITECTURES,
    SAMPLE_TEXTS,
    build_tiny_model,
    min_cosine,
    reference_embeddings,
    save_tiny_encoder,
)

EXACT_FLOOR = 0.99999
# One pooling per architecture, so every mode meets a real model (mean twice: the common case).
POOLING = {
    "bert": "mean",
    "roberta": "cls",
    "xlm-roberta": "max",
    "distilbert": "lasttoken",
    "mpnet": "mean",
    "modernbert": "mean",
}
PROMPTS = {"query": "query: ", "passage": "passage: "}


def _name(arch: str) -> str:
    return f"tiny-{arch}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("own-models")
    out = {
        arch: save_tiny_encoder(
            root / _name(arch), arch, pooling=POOLING[arch], normalize=arch != "xlm-roberta"
        )
        for arch in ARCHITECTURES
    }
    # Prompts excluded from pooling (include_prompt false), a default prompt, mean + cls pooled.
    out["prompted"] = save_tiny_encoder(
        root / "tiny-prompted",
        "bert",
        pooling=("mean", "cls"),
        prompts=PROMPTS,
        default_prompt_name="query",
        include_prompt=False,
        seed=3,
    )
    out["transformers"] = root / "tiny-plain-bert"
    build_tiny_model("bert", out["transformers"], seed=5)
    return out


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]):
    with folders_client(folders.values()) as c:
        yield c


def _encode(client: TestClient, model: str, texts: list[str], **extra: Any) -> Any:
    body = {"model": model, "inputs": texts, "truncate": True, **extra}
    return client.post("/encode", json=body)


def _embeddings(response: Any) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["embeddings"], dtype=np.float32)


# ------------------------------------------------------------------ exactness


@pytest.mark.parametrize("backend", ["full", "flash"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_exact_backends_match_sentence_transformers_through_http(
    client: TestClient, folders: dict[str, Path], arch: str, backend: str
) -> None:
    expected = reference_embeddings(folders[arch], SAMPLE_TEXTS)
    together = _embeddings(_encode(client, _name(arch), SAMPLE_TEXTS, attention=backend))
    assert together.shape == expected.shape
    assert min_cosine(together, expected) >= EXACT_FLOOR
    # Batch composition: each text alone (no padding at all) gives the same vectors.
    alone = np.concatenate(
        [_embeddings(_encode(client, _name(arch), [t], attention=backend)) for t in SAMPLE_TEXTS]
    )
    assert min_cosine(alone, expected) >= EXACT_FLOOR
    if arch != "xlm-roberta":  # saved with a Normalize module
        assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_unnormalised_model_keeps_its_norms_and_openai_route_agrees(
    client: TestClient, folders: dict[str, Path]
) -> None:
    expected = reference_embeddings(folders["xlm-roberta"], SAMPLE_TEXTS[:3])
    got = _embeddings(_encode(client, _name("xlm-roberta"), SAMPLE_TEXTS[:3]))
    assert np.allclose(got, expected, atol=1e-4)  # max pooling, no Normalize: raw values
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-2)
    response = client.post(
        "/v1/embeddings", json={"model": _name("xlm-roberta"), "input": SAMPLE_TEXTS[:3]}
    )
    assert response.status_code == 200, response.text
    openai = np.asarray([d["embedding"] for d in response.json()["data"]], dtype=np.float32)
    assert np.allclose(openai, got, atol=1e-6)


def test_transformers_layout_is_mean_pooled_without_normalising(
    client: TestClient, folders: dict[str, Path]
) -> None:
    """A bare ``save_pretrained`` folder embeds as sentence-transformers loads one: mean over
    the real tokens of the last hidden state."""
    from transformers import AutoModel, AutoTokenizer

    folder = folders["transformers"]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    texts = SAMPLE_TEXTS[:4]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    expected = ((states * mask).sum(1) / mask.sum(1)).numpy()
    got = _embeddings(_encode(client, folder.name, texts))
    assert min_cosine(got, expected) >= EXACT_FLOOR
    assert np.allclose(got, expected, atol=1e-4)


# ------------------------------------------------------------------ prompts


def test_prompts_follow_the_config_and_stay_out_of_the_pooling(
    client: TestClient, folders: dict[str, Path]
) -> None:
    folder = folders["prompted"]
    texts = SAMPLE_TEXTS[:4]
    for prompt in ("query", "passage"):
        expected = reference_embeddings(folder, texts, prompt_name=prompt)
        got = _embeddings(_encode(client, folder.name, texts, prompt_name=prompt))
        assert got.shape[1] == 2 * 32  # mean and cls, concatenated
        assert min_cosine(got, expected) >= EXACT_FLOOR
    # No prompt named: the model's default prompt ("query").
    default = _embeddings(_encode(client, folder.name, texts))
    assert min_cosine(default, reference_embeddings(folder, texts, prompt_name="query")) >= 0.99999
    assert min_cosine(default, reference_embeddings(folder, texts, prompt_name="passage")) < 0.999


def test_unknown_prompt_name_is_a_422_listing_the_prompts(client: TestClient) -> None:
    response = _encode(client, "tiny-prompted", ["x"], prompt_name="search")
    assert response.status_code == 422
    detail = json.dumps(response.json())
    assert "search" in detail and "query" in detail and "passage" in detail
    plain = _encode(client, _name("bert"), ["x"], prompt_name="search")
    assert plain.status_code == 422 and "prompt" in json.dumps(plain.json())


# ------------------------------------------------------------------ backends


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_backend_runs_or_is_refused_naming_those_that_can(
    client: TestClient, arch: str
) -> None:
    card = next(m for m in client.get("/models").json()["data"] if m["name"] == _name(arch))
    offered = {b["name"] for b in card["backends"]}
    refused = card.get("unavailable_backends", {})
    assert offered | set(refused) == set(BACKENDS)
    exact = _embeddings(_encode(client, _name(arch), SAMPLE_TEXTS, attention="full"))
    for backend in BACKENDS:
        response = _encode(client, _name(arch), SAMPLE_TEXTS, attention=backend)
        if backend in offered:
            got = _embeddings(response)
            assert got.shape == exact.shape and np.isfinite(got).all()
            assert min_cosine(got, exact) > 0.0  # an approximation, never garbage
        else:
            assert response.status_code == 422, response.text
            message = json.dumps(response.json())
            assert all(name in message for name in offered), message
            assert "score bias" in message


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_probsparse_with_every_query_active_is_exact_on_every_architecture(
    client: TestClient, arch: str
) -> None:
    """With ``factor`` high enough that every query is active ProbSparse is exact attention, so
    this checks that each architecture's score terms (MPNet's bias, ModernBERT's rotary and
    window) reach the backend intact."""
    exact = _embeddings(_encode(client, _name(arch), SAMPLE_TEXTS, attention="full"))
    got = _embeddings(
        _encode(
            client,
            _name(arch),
            SAMPLE_TEXTS,
            attention="probsparse",
            attention_options={"factor": 100},
        )
    )
    assert min_cosine(got, exact) >= EXACT_FLOOR


def test_mpnet_refuses_random_feature_backends_for_its_relative_bias(client: TestClient) -> None:
    card = next(m for m in client.get("/models").json()["data"] if m["name"] == "tiny-mpnet")
    refused = card["unavailable_backends"]
    # the backends that cannot add a score bias: they approximate softmax(QKᵀ) without forming
    # the scores the bias is added to
    assert set(refused) == {b for b in BACKENDS if not get_backend(b).capabilities.score_bias}
    assert {"performer", "nystrom", "skyformer"} <= set(refused)
    assert all("bias" in reason for reason in refused.values())


# ------------------------------------------------------------------ cards and limits


def test_cards_describe_each_model(client: TestClient) -> None:
    cards = {m["name"]: m for m in client.get("/models").json()["data"]}
    expected_arch = {
        "bert": "bert",
        "roberta": "roberta",
        "xlm-roberta": "xlm-roberta",
        "distilbert": "distilbert",
        "mpnet": "mpnet",
        "modernbert": "modernbert",
    }
    for arch, pooling in POOLING.items():
        card = cards[_name(arch)]
        assert card["architecture"] == expected_arch[arch]
        assert card["dim"] == 32 and card["max_tokens"] == 64
        assert card["pooling"] == pooling
        assert card["task"] == "encode"
    modern = cards["tiny-modernbert"]
    assert "sliding window" in json.dumps(modern["attention_layout"])
    assert cards["tiny-prompted"]["prompts"].items() >= PROMPTS.items()
    assert cards["tiny-prompted"]["default_prompt_name"] == "query"
    assert cards["tiny-plain-bert"]["pooling"] == "mean"
    assert cards["tiny-plain-bert"]["normalize_default"] is False


def test_max_seq_length_from_the_config_bounds_a_text(client: TestClient) -> None:
    text = "word " * 100
    response = client.post("/encode", json={"model": "tiny-bert", "inputs": [text]})
    assert response.status_code == 422
    assert "64" in response.json()["error"]["message"]
    assert _encode(client, "tiny-bert", [text]).status_code == 200  # truncate=true cuts it


# ------------------------------------------------------------------ broken folders


def _break(folder: Path, how: str) -> None:
    weights = folder
    if how == "architecture":
        config = json.loads((weights / "config.json").read_text())
        config["model_type"] = "gpt2"
        (weights / "config.json").write_text(json.dumps(config))
    elif how == "tokenizer":
        (weights / "tokenizer.json").unlink()
    elif how == "weights":
        tensors = load_file(weights / "model.safetensors")
        key = next(k for k in tensors if "query.weight" in k or "attn.Wqkv.weight" in k)
        tensors[key] = tensors[key][:, :-1].contiguous()
        save_file(tensors, weights / "model.safetensors")
    elif how == "module":
        modules = json.loads((weights / "modules.json").read_text())
        modules.append(
            {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}
        )
        (weights / "modules.json").write_text(json.dumps(modules))


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("architecture", "gpt2"),
        ("tokenizer", "tokenizer.json"),
        ("weights", "weight"),
        ("module", "Dense"),
    ],
)
def test_a_broken_folder_stops_start_up_with_one_line_naming_it(
    tmp_path: Path, how: str, says: str
) -> None:
    folder = save_tiny_encoder(tmp_path / f"broken-{how}", "bert", layers=1)
    _break(folder, how)
    settings = Settings(models=(str(folder),), device="cpu", background_load=False)
    with pytest.raises(ModelLoadError) as info:
        load_servables(settings, "cpu")
    message = str(info.value)
    assert "\n" not in message and str(folder) in message and says in message, message


def test_a_text_folder_in_model_dir_is_served_under_its_name(tmp_path: Path) -> None:
    root = tmp_path / "models"
    save_tiny_encoder(root / "my-embedder", "roberta", layers=1)
    settings = Settings(
        models=("informer-etth1-h24",), model_dir=root, device="cpu", background_load=False
    )
    servable = load_servables(settings, "cpu")[-1]
    assert servable.name == "my-embedder" and servable.task == "encode"
    got = servable.model.encode(SAMPLE_TEXTS[:2], truncate=True)
    assert min_cosine(got, reference_embeddings(root / "my-embedder", SAMPLE_TEXTS[:2])) >= 0.99999


# ------------------------------------------------------------------ evaluate, then auto


def test_evaluate_measures_a_folder_so_auto_can_choose_on_it(tmp_path: Path) -> None:
    from models.text.quality.embedding import main as evaluate

    folder = save_tiny_encoder(tmp_path / "tiny-long", "modernbert", max_seq_length=128)
    evaluate([str(folder), "--per-bin", "4"])
    measured = backends_of(read_quality(folder / "quality.json"))
    assert set(measured) == set(BACKENDS) - {"full"}  # every backend it runs
    settings = Settings(models=(str(folder),), device="cpu", background_load=False)
    with TestClient(create_app(settings)) as client:
        card = client.get("/models/tiny-long").json()
        assert card["quality"]["backends"].keys() == measured.keys()
        loose = _encode(client, "tiny-long", SAMPLE_TEXTS, attention="auto", max_quality_loss=0.5)
        exact = _encode(client, "tiny-long", SAMPLE_TEXTS, attention="auto", max_quality_loss=0.0)
    assert loose.status_code == 200 and exact.status_code == 200
    assert exact.json()["attention"] in ("full", "flash")
    assert "x-attention-choice" in loose.headers


# ------------------------------------------------------------------ long texts


def test_long_texts_as_windows_through_both_routes(
    client: TestClient, folders: dict[str, Path]
) -> None:
    long_text = " ".join(SAMPLE_TEXTS * 6)  # several hundred tokens; the models take 64
    refused = client.post("/encode", json={"model": "tiny-bert", "inputs": [long_text]})
    assert refused.status_code == 422 and "windows" in refused.json()["error"]["message"]
    body = {"model": "tiny-bert", "inputs": [long_text, "short"], "long_text": "windows"}
    windowed = _embeddings(client.post("/encode", json=body))
    truncated = _embeddings(_encode(client, "tiny-bert", [long_text, "short"]))
    assert np.allclose(np.linalg.norm(windowed, axis=1), 1.0, atol=1e-5)
    assert min_cosine(windowed[1:], truncated[1:]) >= EXACT_FLOOR  # short: unchanged
    assert min_cosine(windowed[:1], truncated[:1]) < 0.9999  # long: all of it counts
    # Every window's tokens were read: the long text's N body tokens in windows of 62 (64 less
    # [CLS] and [SEP]) that repeat a quarter (15 tokens) of the one before, each window with
    # its two special tokens; then the short text, whole.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folders["bert"]))
    n = len(tokenizer(long_text, add_special_tokens=False).input_ids)
    k = 1 + -(-(n - 62) // 47)  # windows: starts 0, 47, 94, ... until one reaches the end
    short = len(tokenizer("short").input_ids)
    usage = client.post("/encode", json=body).json()["usage"]["tokens"]
    assert usage == n + 15 * (k - 1) + 2 * k + short
    openai = client.post(
        "/v1/embeddings",
        json={"model": "tiny-bert", "input": [long_text, "short"], "long_text": "windows"},
    )
    assert openai.status_code == 200, openai.text
    vectors = np.asarray([d["embedding"] for d in openai.json()["data"]], dtype=np.float32)
    assert np.allclose(vectors, windowed, atol=1e-6)


def test_contradicting_long_text_rules_are_a_422(client: TestClient) -> None:
    body = {"model": "tiny-bert", "inputs": ["x"], "truncate": True, "long_text": "windows"}
    response = client.post("/encode", json=body)
    assert response.status_code == 422
    assert "contradict" in json.dumps(response.json())
