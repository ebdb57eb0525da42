"""LLM embedders (a transformers decoder backbone, last-token pooling, a Dense head, prompts)
served over HTTP: answers equal to sentence-transformers' ``encode`` on ``/encode`` and the OpenAI
route, every backend run (its causal form, or exact attention named in ``x-attention-fallback``),
the card, and folders we cannot run stopping start-up with one line naming them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.attention import BACKENDS, get_backend
from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.helpers import folders_client
from tests.utils.tiny_decoders import build_tiny_backbone, save_tiny_decoder_encoder
from tests.utils.tiny_encoders import SAMPLE_TEXTS

NAME = "tiny-qwen3-embedding"
TOLERANCE = 1e-5
PROMPTS = {"query": "Instruct: find the function\nQuery: ", "document": ""}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("decoder-embedders")
    return save_tiny_decoder_encoder(root / NAME, "qwen3", dense=(32,), prompts=PROMPTS)


@pytest.fixture(scope="module")
def client(folder: Path):
    with folders_client([folder]) as c:
        yield c


def _reference(folder: Path, **kwargs: object) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return np.asarray(model.encode(SAMPLE_TEXTS, batch_size=4, **kwargs), dtype=np.float64)


def test_encode_equals_sentence_transformers(client, folder: Path) -> None:
    answer = client.post("/encode", json={"model": NAME, "inputs": SAMPLE_TEXTS})
    assert answer.status_code == 200, answer.text
    got = np.asarray(answer.json()["embeddings"])
    assert got.shape == (len(SAMPLE_TEXTS), 32)
    assert np.abs(got - _reference(folder)).max() <= TOLERANCE


def test_openai_route_with_the_query_prompt(client, folder: Path) -> None:
    body = {"model": NAME, "input": SAMPLE_TEXTS, "prompt_name": "query"}
    answer = client.post("/v1/embeddings", json=body)
    assert answer.status_code == 200, answer.text
    got = np.asarray([row["embedding"] for row in answer.json()["data"]])
    assert np.abs(got - _reference(folder, prompt_name="query")).max() <= TOLERANCE


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_answers_and_names_a_fallback(client, backend: str) -> None:
    body = {"model": NAME, "inputs": SAMPLE_TEXTS[:4], "attention": backend}
    answer = client.post("/encode", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-attention"] == backend
    fallback = answer.headers.get("x-attention-fallback")
    if get_backend(backend).capabilities.causal:
        assert fallback is None
    else:
        assert fallback is not None and "no causal" in fallback, fallback


def test_card(client) -> None:
    card = client.get(f"/models/{NAME}").json()
    assert card["backbone"].startswith("transformers Qwen3Model")
    assert card["output"] == "dense" and card["dim"] == 32
    assert card["pooling"] == "lasttoken" and card["prompts"] == PROMPTS
    assert set(card["served_backends"]) == set(BACKENDS)
    no_causal = {b for b in BACKENDS if not get_backend(b).capabilities.causal}
    assert set(card["attention_fallbacks"]) == no_causal


def _settings(folder: Path) -> Settings:
    return Settings(models=(str(folder),), device="cpu", background_load=False)


# A config file of the folder, the key changed, the value written, words the refusal holds.
BROKEN = {
    # T5 computes attention in its own code: no backend of ours could run in it.
    "t5-backbone": ("config.json", "model_type", "t5", "attention interface"),
    "unknown-architecture": ("config.json", "model_type", "not-a-model", "'not-a-model'"),
    "dense-activation": (
        "2_Dense/config.json",
        "activation_function",
        "my_package.Swish",
        "'my_package.Swish' is not supported",
    ),
    "dense-width": ("2_Dense/config.json", "in_features", 65, "does not fit"),
    "grouped-heads": ("config.json", "num_key_value_heads", 3, "does not divide"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_folder_we_cannot_run_stops_start_up_in_one_line(tmp_path: Path, case: str) -> None:
    file, key, value, words = BROKEN[case]
    broken = save_tiny_decoder_encoder(tmp_path / case, "qwen3", dense=(16,))
    config = json.loads((broken / file).read_text())
    config[key] = value
    (broken / file).write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as caught:
        load_servables(_settings(broken), "cpu")
    message = str(caught.value)
    assert message.startswith(f"{broken}: ") and "\n" not in message, message
    assert words in message, message


def test_a_causal_lm_checkpoint_serves_as_its_backbone(tmp_path: Path) -> None:
    """A ``*ForCausalLM`` save (an LLM's own checkpoint, lm_head included) under a
    sentence-transformers Transformer module embeds as the bare model does."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    raw = build_tiny_backbone("qwen3", tmp_path / "raw", task="Qwen3ForCausalLM")
    transformer = Transformer(str(raw))
    model = SentenceTransformer(modules=[transformer, Pooling(64, pooling_mode="lasttoken")])
    folder = tmp_path / "causal-lm-embedder"
    model.save(str(folder))
    expected = model.encode(SAMPLE_TEXTS[:3])
    with folders_client([folder]) as client:
        body = {"model": folder.name, "inputs": SAMPLE_TEXTS[:3]}
        answer = client.post("/encode", json=body)
    assert answer.status_code == 200, answer.text
    got = np.asarray(answer.json()["embeddings"])
    assert np.abs(got - expected).max() <= TOLERANCE


def test_auto_chooses_among_measured_backends(folder: Path, tmp_path: Path) -> None:
    """With the folder's own quality figures (``attnserve evaluate``), ``auto`` picks a backend
    within the budget and says why; a fallback backend is priced as what it runs."""
    import shutil

    from models.quality_file import save_quality
    from models.text import SentenceEncoder
    from models.text.quality.embedding import measure

    measured = shutil.copytree(folder, tmp_path / "measured-qwen3")
    encoder = SentenceEncoder.from_folder(measured)
    save_quality(measured / "quality.json", measure(encoder, per_bin=1, max_tokens=128))
    with folders_client([measured]) as client:
        body = {"model": measured.name, "inputs": SAMPLE_TEXTS, "attention": "auto"}
        answer = client.post("/encode", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-attention"] in BACKENDS
    assert "x-attention-choice" in answer.headers


def test_a_backbone_missing_weights_is_refused_not_filled_in(tmp_path: Path) -> None:
    """transformers fills a missing weight with random values and warns; we refuse the folder."""
    from safetensors.torch import load_file, save_file

    broken = save_tiny_decoder_encoder(tmp_path / "missing-weight", "qwen3")
    tensors = load_file(broken / "model.safetensors")
    dropped = next(k for k in tensors if "k_proj" in k)
    del tensors[dropped]
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError) as caught:
        load_servables(_settings(broken), "cpu")
    message = str(caught.value)
    assert "lacks weights" in message and dropped.removeprefix("model.") in message, message
