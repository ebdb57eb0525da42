"""Quantized and shortened embeddings (models/text/quantize.py, models/text/matryoshka.py)
against sentence-transformers' own ``quantize_embeddings`` and ``truncate_dim``, and the model
card's word on Matryoshka training as sentence-transformers writes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer, quantize_embeddings

from models.text import SentenceEncoder
from models.text.folders.weights import model_dir
from models.text.matryoshka import read_shortening, shorten
from models.text.quantize import (
    CALIBRATION_TEXTS,
    PRECISIONS,
    Calibration,
    calibration_texts,
    quantize,
    ranges_of,
)
from tests.utils.tiny_encoders import save_tiny_encoder

TEXTS = ["a first text", "the second one is longer than the first", "three", "x y z w"]


def _embeddings(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("d", [32, 37, 384])  # 37: the last packed byte is padded
def test_quantize_matches_sentence_transformers(precision: str, d: int) -> None:
    calibration = _embeddings(200, d, seed=1)
    # Values past the calibration ranges (clipped) and a constant dimension (zero range).
    x = torch.cat([_embeddings(50, d, seed=2), 2 * _embeddings(5, d, seed=3)])
    calibration[:, 0] = 0.25
    ranges = ranges_of(calibration)
    ours = quantize(x, precision, ranges).numpy()
    theirs = np.asarray(quantize_embeddings(x.numpy(), precision, ranges=ranges.numpy()))  # type: ignore[arg-type]
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def test_one_text_quantizes_alone_as_in_a_batch() -> None:
    # Fixed ranges: a text's codes do not depend on the texts beside it (and a lone text has a
    # range at all; quantize_embeddings refuses to calibrate on one embedding).
    ranges = ranges_of(_embeddings(100, 16, seed=4))
    batch = _embeddings(8, 16, seed=5)
    for precision in ("int8", "uint8"):
        alone = quantize(batch[:1], precision, ranges)
        assert torch.equal(alone[0], quantize(batch, precision, ranges)[0])


def test_scalar_quantization_needs_ranges_and_a_known_precision() -> None:
    x = _embeddings(2, 8, seed=6)
    with pytest.raises(ValueError, match="ranges"):
        quantize(x, "int8")
    with pytest.raises(ValueError, match="unknown precision"):
        quantize(x, "int4", ranges_of(x))


def test_calibration_ranges_follow_normalisation_and_shortening() -> None:
    raw = 3 * _embeddings(64, 12, seed=7)  # not unit length, as the servable stores them
    calibration = Calibration(raw)
    unit = torch.nn.functional.normalize(raw, dim=-1)
    assert torch.allclose(calibration.ranges(None, True), ranges_of(unit))
    assert torch.allclose(calibration.ranges(None, False), ranges_of(raw))
    short = torch.nn.functional.normalize(unit[:, :5], dim=-1)
    assert torch.allclose(calibration.ranges(5, True), ranges_of(short))
    assert calibration.ranges(5, True) is calibration.ranges(5, True)  # worked out once


def test_calibration_texts_are_fixed_and_cut() -> None:
    texts = calibration_texts()
    assert len(texts) == CALIBRATION_TEXTS
    assert texts == calibration_texts()
    assert max(len(t.split()) for t in texts) <= 24


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("mrl") / "enc", "bert", layers=1)


@pytest.mark.parametrize("k", [1, 7, 16, 32])
def test_shorten_matches_truncate_dim(tiny_folder: Path, k: int) -> None:
    ours = shorten(SentenceEncoder.from_folder(tiny_folder).encode(TEXTS, "full"), k, True)
    st = SentenceTransformer(str(tiny_folder), device="cpu", truncate_dim=k)
    theirs = st.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    assert ours.shape == (len(TEXTS), k)
    np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-6)


def test_shorten_without_normalising_keeps_the_components() -> None:
    x = 2 * _embeddings(3, 10, seed=8)
    assert torch.equal(shorten(x, 4, False), x[:, :4])


def test_a_card_written_after_matryoshka_training_says_trained(tmp_path: Path) -> None:
    from sentence_transformers.sentence_transformer.losses import (
        MatryoshkaLoss,
        MultipleNegativesRankingLoss,
    )

    plain = save_tiny_encoder(tmp_path / "plain", "bert", layers=1)
    model = SentenceTransformer(modules=list(SentenceTransformer(str(plain), device="cpu")))
    loss = MatryoshkaLoss(model, MultipleNegativesRankingLoss(model), [32, 16, 8])
    model.model_card_data.set_losses([loss])  # what its trainer records
    model.save(str(tmp_path / "mrl"))
    found = read_shortening(tmp_path / "mrl")
    assert found.trained and "MatryoshkaLoss" in found.evidence
    encoder = SentenceEncoder.from_folder(tmp_path / "mrl")
    assert encoder.shortening.trained
    # The untrained folder's card (sentence-transformers links its Matryoshka introduction in
    # every card it writes) does not count.
    assert "atryoshka" in (plain / "README.md").read_text()
    assert not read_shortening(plain).trained


def test_matryoshka_dims_are_read_from_the_loss_parameters(tmp_path: Path) -> None:
    card = (
        "---\ntags:\n- sentence-transformers\n- loss:MatryoshkaLoss\n---\n\n"
        '* Loss: MatryoshkaLoss with these parameters:\n  ```json\n  {\n      "loss": '
        '"MultipleNegativesRankingLoss",\n      "matryoshka_dims": [\n          768,\n'
        "          256,\n          64\n      ]\n  }\n  ```\n"
    )
    (tmp_path / "README.md").write_text(card)
    found = read_shortening(tmp_path)
    assert found.trained and found.dims == (768, 256, 64)
    assert found.describe(768)["trained_dims"] == [768, 256, 64]


def test_minilm_was_not_trained_for_shortening() -> None:
    found = read_shortening(model_dir())
    assert not found.trained and "README.md" in found.evidence
    assert not read_shortening(None).trained
