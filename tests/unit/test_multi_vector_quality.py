"""``attnserve evaluate`` of a multi-vector (ColBERT) folder (:mod:`models.text.quality.multi_vector`):
every backend the model accepts is measured against exact attention by the agreement of its
MaxSim rankings (Kendall tau, NDCG@10) and the cosine of its token vectors; the exact backends
lose nothing, an approximation is measured, and ``quality.json`` is written in the folder and
read back as ``auto`` reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.attention import BACKENDS, AttentionError
from models.names import DEFAULT_PRECISION
from models.quality_file import backends_of, read_quality
from models.quality_loss import classifier_losses
from models.text.multi_vector import MultiVectorModel
from models.text.quality.classifier import plan_for
from models.text.quality.multi_vector import encode_corpus, measure, run
from service.cli import run_model_tool
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
    accepted = []
    for name in BACKENDS:
        try:
            model.check_attention(name, None)
        except AttentionError:
            continue
        accepted.append(name)
    assert list(figures) == accepted
    for name in EXACT:
        row = figures[name]
        assert row["loss"] == 0.0 and row["kendall_tau"] == 1.0, name
        assert row["ndcg_at_10"] == 1.0 and row["mean_cosine"] == pytest.approx(1.0, abs=1e-5)
        assert row["by_tokens"], name
    # Approximations at their defaults move the rankings of this model: measured, not assumed.
    approximate = {n: r for n, r in figures.items() if r["loss"] > 0.0}
    assert approximate, figures
    for name, row in approximate.items():
        assert row["loss"] == pytest.approx(1.0 - row["kendall_tau"], abs=1e-6), name
        assert 0.0 < row["ndcg_at_10"] <= 1.0 and row["min_cosine"] < 1.0 - 1e-4, name
        for band in row["by_tokens"].values():
            assert band["loss"] == pytest.approx(1.0 - band["kendall_tau"], abs=1e-6)
    corpus = result["corpus"]
    assert corpus["pairs"] == PAIRS * len(plan) and corpus["queries"] == len(plan)


def test_evaluate_writes_quality_json_that_auto_reads(
    folder: Path, model: MultiVectorModel, capsys: pytest.CaptureFixture[str]
) -> None:
    """``attnserve evaluate FOLDER`` reaches the multi-vector measurement (before the text
    encoders' branch: the folder has modules.json too), writes the folder's quality.json, and
    the losses auto budgets against come back from it, the float32 reference's at 0."""
    output = folder / "quality.json"
    output.unlink(missing_ok=True)
    argv = [str(folder), "--pairs-per-band", str(PAIRS), "--precisions", "bfloat16"]
    assert run_model_tool("evaluate", argv) == 0
    assert "wrote" in capsys.readouterr().out
    quality = read_quality(output)
    assert quality["task"] == "multi_vector"
    assert set(quality["precisions"]) == {DEFAULT_PRECISION, "bfloat16"}
    # bfloat16: every backend, the reference included, against the float32 exact vectors.
    assert "full" in backends_of(quality, "bfloat16")
    assert backends_of(quality, "bfloat16")["full"]["mean_cosine"] < 1.0
    losses = classifier_losses(quality, 32)
    assert losses["full"] == (0.0, {})
    for name, entry in backends_of(quality).items():
        assert losses[name][0] == pytest.approx(entry["by_tokens"]["1-64"]["loss"]), name
    # The model reads the same file (the card's figures, the servable's losses).
    assert MultiVectorModel.from_folder(folder).quality()["task"] == "multi_vector"
    assert run_model_tool("evaluate", [str(folder), "--show"]) == 0
    assert "| `full` |" in capsys.readouterr().out
