"""Embedders whose backbone is a transformers model run through its attention interface (Qwen3,
Qwen2, Llama, Gemma 3): equal to sentence-transformers' own ``encode`` on the exact backends,
every pooling mode, ``Dense`` heads, prompts, grouped-query attention without copies on
``flash``, causal forms of the approximate backends, and exact attention named where a backend
has none.

The models are tiny and random (``tests/utils/tiny_decoders.py``), saved by
``SentenceTransformer.save``, so the reference is the real library.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.attention import BACKENDS, get_backend
from models.attention.base import repeat_kv_heads
from models.text import SentenceEncoder
from tests.utils.tiny_decoders import BACKBONES, save_tiny_decoder_encoder
from tests.utils.tiny_encoders import SAMPLE_TEXTS

TOLERANCE = 1e-5  # float32, the bound against sentence-transformers
EXACT = [b for b in BACKENDS if get_backend(b).exact and b in ("flash", "full")]
# One pooling per architecture, so every mode meets a real model.
POOLING = {
    "qwen3": "lasttoken",
    "qwen2": "mean",
    "llama": "weightedmean",
    "gemma3_text": "cls",
    "modernbert-decoder": "max",
    "nomic_bert": ("mean", "lasttoken"),
}
PROMPTS = {"query": "Instruct: find the function\nQuery: ", "document": ""}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decoders")
    return {
        arch: save_tiny_decoder_encoder(
            root / arch,
            arch,
            pooling=POOLING[arch],
            dense=(48, 24) if arch == "qwen3" else (),
            prompts=PROMPTS if arch == "qwen3" else None,
            seed=BACKBONES.index(arch),
        )
        for arch in BACKBONES
    }


def _reference(folder: Path, texts: list[str], **kwargs: object) -> torch.Tensor:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return model.encode(texts, convert_to_tensor=True, batch_size=3, **kwargs).float()


@pytest.mark.parametrize("arch", BACKBONES)
@pytest.mark.parametrize("backend", EXACT)
def test_equal_to_sentence_transformers(folders: dict[str, Path], arch: str, backend: str) -> None:
    encoder = SentenceEncoder.from_folder(folders[arch])
    expected = _reference(folders[arch], SAMPLE_TEXTS)
    got = encoder.encode(SAMPLE_TEXTS, backend=backend)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_dense_heads_and_prompts(folders: dict[str, Path]) -> None:
    encoder = SentenceEncoder.from_folder(folders["qwen3"])
    assert encoder.dim == 24
    assert encoder.card()["dense"] == ["64 -> 48, Tanh", "48 -> 24, Tanh"]
    expected = _reference(folders["qwen3"], SAMPLE_TEXTS, prompt_name="query")
    got = encoder.encode(SAMPLE_TEXTS, prompt_name="query")
    assert (got - expected).abs().max().item() <= TOLERANCE
    plain = encoder.encode(SAMPLE_TEXTS)
    assert (plain - got).abs().max().item() > 1e-3  # the prompt changes the embedding


def test_batched_equals_alone(folders: dict[str, Path]) -> None:
    """Right padding under a causal mask: each text gets what it gets alone."""
    encoder = SentenceEncoder.from_folder(folders["llama"])
    together = encoder.encode(SAMPLE_TEXTS)
    alone = torch.cat([encoder.encode([t]) for t in SAMPLE_TEXTS])
    assert (together - alone).abs().max().item() <= TOLERANCE


def test_gemma3_sliding_layers_padded(folders: dict[str, Path]) -> None:
    """Gemma 3's sliding-window layers (window 8, texts far longer) padded in one batch: the
    pads past a window's reach stay finite and every text matches the reference."""
    encoder = SentenceEncoder.from_folder(folders["gemma3_text"])
    texts = ["x", "Open a file and return a stream; raise OSError upon failure. " * 6]
    got = encoder.encode(texts, backend="full")
    assert torch.isfinite(got).all()
    assert (got - _reference(folders["gemma3_text"], texts)).abs().max().item() <= TOLERANCE


def test_grouped_keys_reach_flash_uncopied(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen3's 2 key/value heads serve 4 query heads: ``flash`` takes them as they are (SDPA's
    grouped-query mode), other backends get them repeated per head."""
    import models.attention.flash as flash

    seen: list[tuple[int, int]] = []
    sdpa = flash.F.scaled_dot_product_attention

    def spy(q: torch.Tensor, k: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen.append((q.shape[1], k.shape[1]))
        return sdpa(q, k, *args, **kwargs)

    monkeypatch.setattr(flash.F, "scaled_dot_product_attention", spy)
    SentenceEncoder.from_folder(folders["qwen3"]).encode(SAMPLE_TEXTS[:3], backend="flash")
    assert seen and all(pair == (4, 2) for pair in seen)


def test_repeat_kv_heads_matches_transformers() -> None:
    from transformers.models.llama.modeling_llama import repeat_kv

    x = torch.randn(2, 3, 5, 4)
    assert torch.equal(repeat_kv_heads(x, 6), repeat_kv(x, 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_runs_or_falls_back_by_name(folders: dict[str, Path], backend: str) -> None:
    """A causal backbone takes every backend: its causal form, or exact attention named on the
    card and by :meth:`HFBackbone.fallback` (the ``x-attention-fallback`` header)."""
    encoder = SentenceEncoder.from_folder(folders["qwen3"])
    got = encoder.encode(SAMPLE_TEXTS, backend=backend)
    assert got.shape == (len(SAMPLE_TEXTS), 24) and torch.isfinite(got).all()
    fallback = encoder.model.fallback(backend, {})
    card = encoder.card()
    if get_backend(backend).capabilities.causal:
        assert fallback is None and backend not in card["attention_fallbacks"]
    else:
        assert fallback is not None and "no causal" in fallback
        assert backend in card["attention_fallbacks"]
        exact = encoder.encode(SAMPLE_TEXTS, backend="flash")
        assert (got - exact).abs().max().item() <= TOLERANCE


def test_causal_approximation_is_causal(folders: dict[str, Path]) -> None:
    """bigbird's causal form on a text longer than its blocks: every token's state depends on
    the tokens before it only (a prefix run alone gives the same states)."""
    encoder = SentenceEncoder.from_folder(folders["qwen3"], max_tokens=256)
    options = {"block_size": 8, "num_random_blocks": 1}
    ids = encoder.tokenize(["Return the number of items in a container. " * 8])[0][:120]
    full = encoder.token_embeddings([ids], "bigbird", options)[0]
    prefix = encoder.token_embeddings([ids[:70]], "bigbird", options)[0]
    assert (full[:70] - prefix).abs().max().item() <= TOLERANCE
    exact = encoder.token_embeddings([ids], "flash")[0]
    assert (full - exact).abs().max().item() > 1e-3  # the blocks do not cover 120 tokens


def test_card_and_estimates(folders: dict[str, Path]) -> None:
    encoder = SentenceEncoder.from_folder(folders["qwen3"])
    card = encoder.card()
    assert card["backbone"].startswith("transformers Qwen3Model")
    assert card["architecture"] == "qwen3" and card["key_value_heads"] == 2
    assert card["output"] == "dense" and card["pooling"] == "lasttoken"
    assert card["prompts"] == PROMPTS
    short = encoder.memory_estimate("flash", None, 1, 128)
    long = encoder.memory_estimate("flash", None, 1, 256)
    assert long > short > 0
    # full materialises the scores: more than flash at the same length
    assert encoder.memory_estimate("full", None, 4, 256) > encoder.memory_estimate(
        "flash", None, 4, 256
    )
    assert encoder.work_estimate("bigbird", {"block_size": 8}, 1, 256) < encoder.work_estimate(
        "full", None, 1, 256
    )


def test_bfloat16_copy_runs(folders: dict[str, Path]) -> None:
    encoder = SentenceEncoder.from_folder(folders["qwen3"])
    half = encoder.with_precision("bfloat16")
    got = half.encode(SAMPLE_TEXTS)
    cosine = torch.nn.functional.cosine_similarity(got, encoder.encode(SAMPLE_TEXTS))
    assert got.dtype == torch.float32 and cosine.min().item() > 0.95


def test_quality_command_measures_a_decoder(folders: dict[str, Path]) -> None:
    """``attnserve evaluate``'s measurement on a decoder embedder: the exact and fallback rows
    match the reference, the approximations are measured, not assumed."""
    from models.text.quality.embedding import measure

    encoder = SentenceEncoder.from_folder(folders["qwen3"])
    result = measure(encoder, per_bin=1, max_tokens=128, only=["flash", "nystrom", "performer"])
    rows = result["precisions"]["float32"]["backends"]
    assert set(rows) == {"flash", "nystrom", "performer"}
    assert rows["flash"]["min_cosine"] >= 1 - 1e-5
    assert rows["nystrom"]["min_cosine"] >= 1 - 1e-5  # no causal form: it ran flash
    assert rows["performer"]["mean_cosine"] < 0.999


def test_a_bidirectional_backbone_runs_every_backend_as_is(folders: dict[str, Path]) -> None:
    """NomicBERT's layers are not causal: the backends without a causal form run themselves,
    nothing falls back, and an approximation changes the answer."""
    encoder = SentenceEncoder.from_folder(folders["nomic_bert"])
    card = encoder.card()
    assert card["attention_fallbacks"] == {} and "bidirectional" in card["attention_layout"]
    assert all(encoder.model.fallback(b, {}) is None for b in BACKENDS)
    exact = encoder.encode(SAMPLE_TEXTS, backend="flash")
    landmarks = encoder.encode(SAMPLE_TEXTS, backend="nystrom", options={"num_landmarks": 4})
    assert (landmarks - exact).abs().max().item() > 1e-3
