"""``attnserve evaluate`` of a multi-vector (ColBERT) folder (:mod:`models.text.quality.multi_vector`):
every backend the model accepts is measured against exact attention by the agreement of its
MaxSim rankings (Kendall tau, NDCG@10) and the cosine of its token vectors; the exact backends
lose nothing, an approximation is measured, and ``quality.json`` is written in the folder and
read back as ``auto`` reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.quality_file import backends_of
from models.text.multi_vector import MultiVectorModel
from models.text.quality.classifier import plan_for
from models.text.quality.multi_vector import encode_corpus, measure, run
from tests.utils.pair_quality import accepted, approximations, evaluate_round_trip
from tests.utils.tiny_multi_vector import VARIANTS, reference_scores, save_tiny_multi_vector

# The reference: sentence-transformers 6's MultiVectorEncoder (older releases have none).
pytest.importorskip("sentence_transformers.multi_vector_encoder")

EXACT = ("flash", "full")
PAIRS = 20  # one query of 20 candidates per band: the tiny models' documents fit one band
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_multi_vector(tmp_path_factory.mktemp("mvq") / "colbert", "colbert")


@pytest.fixture(scope="module")
def model(folder: Path) -> MultiVectorModel:
    return MultiVectorModel.from_folder(folder)


@pytest.fixture(scope="module")
def plan(model: MultiVectorModel) -> list:
    return plan_for(model.side_tokenizers["document"].max_tokens, PAIRS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_exact_scores_are_sentence_transformers_maxsim(tmp_path: Path, variant: str) -> None:
    """What every backend is compared with: the reference backend's MaxSim (or MeanMaxSim)
    scores of the corpus equal MultiVectorEncoder's own similarity of the same query and
    documents, on every variant of the tiny models (expansion attended or not, no mask)."""
    folder = save_tiny_multi_vector(tmp_path / variant, variant)
    model = MultiVectorModel.from_folder(folder)
    plan = plan_for(model.side_tokenizers["document"].max_tokens, PAIRS)
    encoded = encode_corpus(model, plan)
    exact = run(model, encoded, "full")
    group = encoded.corpus.groups[0]
    query = encoded.corpus.pairs[group[0]][0]
    documents = [encoded.corpus.pairs[i][1] for i in group]
    expected = torch.tensor(reference_scores(folder, query, documents), dtype=torch.float64)
    diff = float((exact.scores[group, 0] - expected).abs().max())
    assert diff <= TOLERANCE * float(expected.abs().max()), diff


def test_every_accepted_backend_is_measured_against_exact_attention(
    model: MultiVectorModel, plan: list
) -> None:
    result = measure(model, plan)
    assert result["task"] == "multi_vector" and result["reference"] == "full"
    figures = backends_of(result)
    assert list(figures) == accepted(model)
    for name in EXACT:
        row = figures[name]
        assert row["loss"] == 0.0 and row["kendall_tau"] == 1.0, name
        assert row["ndcg_at_10"] == 1.0 and row["mean_cosine"] == pytest.approx(1.0, abs=1e-5)
        assert row["by_tokens"], name
    # Approximations at their defaults move the rankings of this model: measured, not assumed.
    for name, row in approximations(figures).items():
        assert 0.0 < row["ndcg_at_10"] <= 1.0 and row["min_cosine"] < 1.0 - 1e-4, name
    corpus = result["corpus"]
    assert corpus["pairs"] == PAIRS * len(plan) and corpus["queries"] == len(plan)


def test_evaluate_writes_quality_json_that_auto_reads(
    folder: Path, model: MultiVectorModel, capsys: pytest.CaptureFixture[str]
) -> None:
    """``attnserve evaluate FOLDER`` reaches the multi-vector measurement (before the text
    encoders' branch: the folder has modules.json too), writes the folder's quality.json, and
    the losses auto budgets against come back from it, the float32 reference's at 0."""
    quality = evaluate_round_trip(folder, "multi_vector", PAIRS, capsys)
    # bfloat16: every backend, the reference included, against the float32 exact vectors.
    assert "full" in backends_of(quality, "bfloat16")
    assert backends_of(quality, "bfloat16")["full"]["mean_cosine"] < 1.0
    # The model reads the same file (the card's figures, the servable's losses).
    assert MultiVectorModel.from_folder(folder).quality()["task"] == "multi_vector"
