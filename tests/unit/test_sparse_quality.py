"""``attnserve evaluate`` of a SPLADE folder (:mod:`models.text.quality.sparse`): every backend
the model accepts is measured against exact attention by the agreement of its dot-product
rankings (Kendall tau, NDCG@10), the top-k overlap and relative L2 error of its vectors; the
exact backends lose nothing, an approximation is measured, an inference-free folder's static
side is left out of the per-vector figures, and ``quality.json`` is written in the folder and
read back as ``auto`` reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.quality_file import backends_of
from models.text.quality.classifier import plan_for
from models.text.quality.sparse import encode_corpus, measure, relative_l2, run, top_k_overlap
from models.text.sparse import SparseEncoder
from tests.utils.pair_quality import accepted, approximations, evaluate_round_trip
from tests.utils.tiny_sparse import reference_vectors, save_tiny_inference_free, save_tiny_splade

pytest.importorskip("sentence_transformers.sparse_encoder")

EXACT = ("flash", "full")
PAIRS = 20  # one query of 20 candidates: the tiny models' 64 tokens are one band
TOLERANCE = 1e-5
SIDES_BOTH = ["query", "document"]  # a plain SPLADE model runs the network for both


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_splade(tmp_path_factory.mktemp("sq") / "splade", "bert")


@pytest.fixture(scope="module")
def encoder(folder: Path) -> SparseEncoder:
    return SparseEncoder.from_folder(folder)


@pytest.mark.parametrize("free", [False, True], ids=["splade", "inference-free"])
def test_the_exact_scores_are_sentence_transformers_dot_products(
    tmp_path: Path, free: bool
) -> None:
    """What every backend is compared with: the reference backend's scores of a query's
    candidates equal the dot products of sentence-transformers' ``encode_query`` and
    ``encode_document`` vectors of the same texts."""
    if free:
        folder = save_tiny_inference_free(tmp_path / "free", "distilbert", seed=2)
    else:
        folder = save_tiny_splade(tmp_path / "splade", "bert", seed=1)
    encoder = SparseEncoder.from_folder(folder)
    encoded = encode_corpus(encoder, plan_for(encoder.max_tokens, PAIRS))
    exact = run(encoder, encoded, "full")
    group = encoded.corpus.groups[0]
    query = encoded.corpus.pairs[group[0]][0]
    documents = [encoded.corpus.pairs[i][1] for i in group]
    want = (
        reference_vectors(folder, documents, "document")
        @ reference_vectors(folder, [query], "query")[0]
    )
    diff = float((exact.scores[group, 0] - want.double()).abs().max())
    assert diff <= TOLERANCE * float(want.abs().max()), diff


def test_every_accepted_backend_is_measured_against_exact_attention(
    encoder: SparseEncoder,
) -> None:
    plan = plan_for(encoder.max_tokens, PAIRS)
    result = measure(encoder, plan)
    assert result["task"] == "sparse" and result["reference"] == "full"
    figures = backends_of(result)
    assert list(figures) == accepted(encoder)
    for name in EXACT:
        row = figures[name]
        assert row["loss"] == 0.0 and row["kendall_tau"] == 1.0, name
        assert row["top_k_overlap"] == 1.0 and row["relative_l2"] <= TOLERANCE, name
        assert row["by_tokens"], name
    # Approximations at their defaults move this model's vectors and rankings: measured.
    for name, row in approximations(figures).items():
        assert row["min_top_k_overlap"] < 1.0 and row["max_relative_l2"] > 1e-3, name
    corpus = result["corpus"]
    assert corpus["pairs"] == PAIRS * len(plan) and corpus["network_sides"] == SIDES_BOTH


def test_an_inference_free_folder_measures_its_network_side(tmp_path: Path) -> None:
    """The static query side is the same under every backend: its vectors are equal, it is
    left out of the per-vector figures, and the documents' changes still move the ranking."""
    folder = save_tiny_inference_free(tmp_path / "free", "distilbert", seed=2)
    encoder = SparseEncoder.from_folder(folder)
    encoded = encode_corpus(encoder, plan_for(encoder.max_tokens, PAIRS))
    assert not encoded.query_side.network and encoded.document_side.network
    exact = run(encoder, encoded, "full")
    result = measure(encoder, plan_for(encoder.max_tokens, PAIRS), backends=("performer",))
    assert result["corpus"]["network_sides"] == ["document"]
    row = backends_of(result)["performer"]
    assert row["loss"] > 0.0 and row["top_k_overlap"] < 1.0
    got = run(encoder, encoded, "performer")
    assert torch.equal(got.queries, exact.queries)
    # The per-vector figures are the documents' alone.
    overlaps = [top_k_overlap(x, y) for x, y in zip(got.documents, exact.documents, strict=True)]
    assert row["top_k_overlap"] == pytest.approx(sum(overlaps) / len(overlaps), abs=1e-6)


def test_top_k_overlap_and_relative_l2() -> None:
    exact = torch.tensor([0.0, 5.0, 4.0, 3.0, 0.0])
    assert top_k_overlap(exact, exact, k=2) == 1.0
    # The second largest is lost to an entry the exact vector lacks.
    assert top_k_overlap(torch.tensor([0.0, 5.0, 1.0, 0.0, 4.5]), exact, k=2) == 0.5
    # k is cut to the exact vector's three non-zero entries; a zero never counts as kept.
    assert top_k_overlap(torch.tensor([0.0, 5.0, 0.0, 0.0, 0.0]), exact) == pytest.approx(1 / 3)
    assert top_k_overlap(torch.tensor([1.0, 0.0]), torch.zeros(2)) == 1.0
    assert relative_l2(exact * 1.1, exact) == pytest.approx(0.1, rel=1e-5)
    assert relative_l2(torch.zeros(2), torch.zeros(2)) == 0.0
    assert relative_l2(torch.ones(2), torch.zeros(2)) == 1.0


def test_evaluate_writes_quality_json_that_auto_reads(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``attnserve evaluate FOLDER`` reaches the sparse measurement (before the text encoders'
    branch: the folder has modules.json too), writes the folder's quality.json, and the losses
    auto budgets against come back from it, the float32 reference's at 0."""
    quality = evaluate_round_trip(folder, "sparse", PAIRS, capsys)
    # bfloat16: every backend, the reference included, against the float32 exact vectors.
    assert backends_of(quality, "bfloat16")["full"]["relative_l2"] > 0.0
    assert SparseEncoder.from_folder(folder).quality()["task"] == "sparse"
