"""Multi-vector (ColBERT-style) models from sentence-transformers' ``MultiVectorEncoder``
folders: the same token vectors as its ``encode_query`` / ``encode_document`` / ``encode`` (same
count, <= 1e-5) and the same MaxSim scores, on the exact backends; every other backend runs;
broken folders are refused in one line.

The models are tiny and random (:mod:`tests.utils.tiny_multi_vector`), saved by the library's
own ``save``, so the reference is the real library.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from models.attention import BACKENDS, AttentionError
from models.text.folders.multi_vector import is_multi_vector_folder, read_multi_vector_folder
from models.text.multi_vector import MultiVectorModel
from tests.utils.tiny_encoders import ARCHITECTURES
from tests.utils.tiny_multi_vector import (
    QUERY_EXPANSION,
    TEXTS,
    TOKEN_DIM,
    VARIANTS,
    reference_scores,
    reference_vectors,
    save_tiny_multi_vector,
)

# The reference: sentence-transformers 6's MultiVectorEncoder (older releases have none).
pytest.importorskip("sentence_transformers.multi_vector_encoder")

EXACT = ("flash", "full")
TOLERANCE = 1e-5
SIDES = ("query", "document", "none")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multi-vector")
    return {v: save_tiny_multi_vector(root / v, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, MultiVectorModel]:
    return {v: MultiVectorModel.from_folder(f) for v, f in folders.items()}


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_token_vectors_equal_sentence_transformers(
    folders: dict[str, Path],
    models: dict[str, MultiVectorModel],
    variant: str,
    side: str,
    backend: str,
) -> None:
    expected = reference_vectors(folders[variant], TEXTS, side)
    got = models[variant].encode(TEXTS, side, backend, truncate=True)
    assert [g.shape for g in got] == [e.shape for e in expected]  # same tokens kept, same width
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == torch.float32
        np.testing.assert_allclose(g.numpy(), e, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_architecture_gives_the_token_vectors_of_sentence_transformers(
    tmp_path: Path, architecture: str
) -> None:
    """ColBERT's settings (expansion nothing attends to, skiplist) on each encoder we run:
    ModernBERT's sliding-window layers, RoBERTa's offset positions, MPNet's relative bias."""
    folder = save_tiny_multi_vector(tmp_path / architecture, "colbert", architecture=architecture)
    model = MultiVectorModel.from_folder(folder)
    for side in ("query", "document"):
        expected = reference_vectors(folder, TEXTS, side)
        for backend in EXACT:
            got = model.encode(TEXTS, side, backend, truncate=True)
            assert [g.shape for g in got] == [e.shape for e in expected]
            worst = max(
                float((g - torch.from_numpy(e)).abs().max())
                for g, e in zip(got, expected, strict=True)
            )
            assert worst <= TOLERANCE, (side, backend, worst)


def test_the_settings_are_exercised(models: dict[str, MultiVectorModel]) -> None:
    """What the equality test leans on: expansion to 16 tokens, the skiplist dropping document
    punctuation but not the query's, and the widths the Dense modules give."""
    colbert = models["colbert"]
    text = ["hello, world."]
    query, document = colbert.encode(text, "query")[0], colbert.encode(text, "document")[0]
    assert query.shape == (QUERY_EXPANSION, TOKEN_DIM)
    assert document.shape[0] < len(colbert.rows(text, "document")[0].ids)  # "," "." skipped
    assert torch.allclose(query.norm(dim=-1), torch.ones(len(query)), atol=1e-6)
    assert models["plain"].encode(text)[0].shape[0] == len(models["plain"].rows(text)[0].ids)


@pytest.mark.parametrize("variant", VARIANTS)
def test_maxsim_equals_sentence_transformers_similarity(
    folders: dict[str, Path], models: dict[str, MultiVectorModel], variant: str
) -> None:
    model = models[variant]
    expected = reference_scores(folders[variant], TEXTS[4], TEXTS)
    query = model.encode([TEXTS[4]], "query", truncate=True)[0]
    got = model.score(query, model.encode(TEXTS, "document", truncate=True))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_runs_or_is_refused_by_name(
    models: dict[str, MultiVectorModel], backend: str
) -> None:
    model = models["colbert"]
    try:
        model.check_attention(backend, None)
    except AttentionError as exc:
        assert backend in str(exc)
        return
    got = model.encode(TEXTS, "query", backend, truncate=True)
    assert [g.shape[0] for g in got] == [QUERY_EXPANSION] * len(TEXTS)
    assert all(bool(torch.isfinite(g).all()) for g in got)


def test_jagged_flash_is_refused_when_expansion_tokens_are_not_keys(
    models: dict[str, MultiVectorModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA's jagged kernel reads the key mask as the queries too; the check says so (on a CPU
    the backend's own refusal comes first, so the base check is stood in for)."""
    from models.text.base import TextModel

    monkeypatch.setattr(TextModel, "check_attention", lambda *_: {"padding": "jagged"})
    with pytest.raises(AttentionError, match="expansion"):
        models["colbert"].check_attention("flash", {"padding": "jagged"})
    assert models["attend"].check_attention("flash", {"padding": "jagged"})  # they are keys


def test_a_padded_batch_gives_each_text_what_it_gets_alone(
    models: dict[str, MultiVectorModel],
) -> None:
    model = models["colbert"]
    together = model.encode(TEXTS, "query", "flash", truncate=True)
    for text, vectors in zip(TEXTS, together, strict=True):
        alone = model.encode([text], "query", "flash", truncate=True)[0]
        torch.testing.assert_close(vectors, alone, rtol=0, atol=1e-5)


def test_the_folder_is_told_apart_from_sentence_encoders(folders: dict[str, Path]) -> None:
    assert all(is_multi_vector_folder(f) for f in folders.values())
    spec = read_multi_vector_folder(folders["colbert"])
    assert spec.sides["query"].max_tokens == QUERY_EXPANSION
    assert spec.sides["document"].max_tokens == 48
    assert spec.masked and "," in spec.skiplist_words


def _broken(folder: Path, tmp_path: Path, module: str, change: dict[str, object]) -> Path:
    copy = tmp_path / "broken"
    shutil.copytree(folder, copy)
    path = copy / module / "config.json" if module else copy / "sentence_bert_config.json"
    raw = json.loads(path.read_text())
    raw.update(change)
    path.write_text(json.dumps(raw))
    return copy


@pytest.mark.parametrize(
    ("module", "change", "needle"),
    [
        ("1_Dense", {"module_input_name": "sentence_embedding"}, "token_embeddings"),
        ("", {"query_expansion": {"strategy": "sometimes", "length": 4}}, "strategy"),
        ("", {"query_expansion": {"strategy": "fixed", "length": 999}}, "max_seq_length"),
    ],
)
def test_a_bad_folder_is_refused_in_one_line(
    folders: dict[str, Path], tmp_path: Path, module: str, change: dict[str, object], needle: str
) -> None:
    broken = _broken(folders["colbert"], tmp_path, module, change)
    with pytest.raises(ValueError, match=needle) as info:
        MultiVectorModel.from_folder(broken)
    assert "\n" not in str(info.value)
