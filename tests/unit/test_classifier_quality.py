"""``attnserve evaluate`` for rerankers and classifiers (:mod:`models.text.quality.classifier`):
the rank statistics on hand-worked cases, and the ``quality.json`` it writes for a tiny folder."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from models.attention import BACKENDS
from models.text.classifier import TextClassifier
from models.text.quality.classifier import build_corpus, main, measure
from models.text.quality.ranking import graded_relevance, kendall_tau_b, label_figures, ndcg_at_k
from service.cli import main as cli_main
from tests.utils.tiny_classifiers import save_tiny_classifier

T = torch.tensor


# ---------------------------------------------------------------------------------- Kendall tau


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ([1, 2, 3, 4], [1, 2, 3, 4], 1.0),
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
        # one discordant pair of six: (5 - 1) / 6
        ([1, 2, 3, 4], [1, 3, 2, 4], 4 / 6),
        # a tie in x: pairs (0,2), (1,2) concordant, (0,1) tied in x only: 2 / sqrt(2 * 3)
        ([1, 1, 2], [1, 2, 3], 2 / math.sqrt(6)),
        # ties in both: x ties (0,1), y ties (2,3); C = 4 [(0,2) (0,3) (1,2) (1,3)], D = 0,
        # untied pairs 5 in each: 4 / 5
        ([1, 1, 2, 3], [1, 2, 3, 3], 4 / 5),
        ([2, 2, 2], [1, 2, 3], 0.0),  # x constant: undefined, 0 here
        ([2, 2, 2], [5, 5, 5], 1.0),  # both constant: the same (non-)ranking
    ],
)
def test_kendall_tau_b_hand_worked(x: list[float], y: list[float], expected: float) -> None:
    assert kendall_tau_b(T(x, dtype=torch.float32), T(y, dtype=torch.float32)) == pytest.approx(
        expected, abs=1e-12
    )


def _tau_b_by_counting(x: list[float], y: list[float]) -> float:
    """Tau-b from its definition, one pair at a time."""
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        tied_x += dx == 0
        tied_y += dy == 0
        if dx * dy > 0:
            concordant += 1
        elif dx * dy < 0:
            discordant += 1
    pairs = len(x) * (len(x) - 1) // 2
    return (concordant - discordant) / math.sqrt((pairs - tied_x) * (pairs - tied_y))


def test_kendall_tau_b_matches_a_pair_count_with_ties() -> None:
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        x = torch.randint(0, 6, (25,), generator=gen).double().tolist()  # many ties
        y = torch.randint(0, 6, (25,), generator=gen).double().tolist()
        assert kendall_tau_b(T(x), T(y)) == pytest.approx(_tau_b_by_counting(x, y), abs=1e-12)


# ---------------------------------------------------------------------------------- NDCG


def test_graded_relevance_counts_items_scored_below() -> None:
    assert graded_relevance(T([0.3, 0.9, 0.1, 0.3])).tolist() == [1.0, 3.0, 0.0, 1.0]


def test_ndcg_hand_worked() -> None:
    reference = T([3.0, 2.0, 1.0])  # gains 2, 1, 0; ideal DCG = 2 + 1 / log2(3)
    ideal = 2 + 1 / math.log2(3)
    assert ndcg_at_k(T([30.0, 20.0, 10.0]), reference) == pytest.approx(1.0)
    # reversed: gains 0, 1, 2 at ranks 0, 1, 2
    assert ndcg_at_k(T([1.0, 2.0, 3.0]), reference) == pytest.approx(
        (1 / math.log2(3) + 2 / 2) / ideal
    )
    # top two swapped: gains 1, 2, 0
    assert ndcg_at_k(T([2.0, 3.0, 1.0]), reference) == pytest.approx((1 + 2 / math.log2(3)) / ideal)
    # k = 1: only the top item counts
    assert ndcg_at_k(T([2.0, 3.0, 1.0]), reference, k=1) == pytest.approx(1 / 2)
    assert ndcg_at_k(T([1.0, 2.0]), T([5.0, 5.0])) == 1.0  # no gains anywhere


def test_label_figures_hand_worked() -> None:
    reference = T([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    got = T([[2.0, 0.0], [2.0, 0.0], [1.0, 0.0]])  # the second top label differs
    p = torch.softmax(T([2.0, 0.0]), -1)
    figures = label_figures(got, reference)
    assert figures["agreement"] == pytest.approx(2 / 3, abs=1e-6)
    assert figures["loss"] == pytest.approx(1 / 3, abs=1e-6)
    assert figures["total_variation"] == pytest.approx(float(p[0] - p[1]) / 3, abs=1e-6)


# ---------------------------------------------------------------------------------- evaluate


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ce") / "tiny-rerank"
    return save_tiny_classifier(folder, "bert", num_labels=1, cross_encoder=True)


def test_corpus_spreads_each_query_over_its_band(reranker: Path) -> None:
    classifier = TextClassifier.from_folder(reranker)
    corpus = build_corpus(classifier, [((1, 64), 20), ((65, 128), 20)], candidates=10)
    assert [len(g) for g in corpus.groups] == [10, 10, 10, 10]
    lengths = corpus.lengths
    assert all(lengths[i] <= 64 for g in corpus.groups[:2] for i in g)
    assert all(65 <= lengths[i] <= 128 for g in corpus.groups[2:] for i in g)
    for group in corpus.groups:
        query, right = corpus.pairs[group[0]]
        assert right.startswith(query.split()[0])  # the right document opens with its query
        assert len({lengths[i] for i in group}) > 5  # lengths spread, not one size


def test_evaluate_writes_quality_json(reranker: Path, tmp_path: Path) -> None:
    out = tmp_path / "quality.json"
    main([str(reranker), "--pairs-per-band", "40", "--precisions", "bfloat16", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["task"] == "rerank"
    assert result["reference"] == "full"  # a 128-token model
    assert set(result) == {"task", "reference", "metric", "corpus", "precisions"}
    assert set(result["precisions"]) == {"float32", "bfloat16"}
    assert result["corpus"]["pairs"] == 80
    backends = result["precisions"]["float32"]["backends"]
    assert set(backends) == set(BACKENDS)
    for name, row in backends.items():
        assert set(row) == {"options", "loss", "kendall_tau", "ndcg_at_10", "by_tokens"}, name
        assert set(row["by_tokens"]) == {"1-64", "65-128"}
        for band in row["by_tokens"].values():
            assert set(band) == {"pairs", "loss", "kendall_tau", "ndcg_at_10"}
            assert band["pairs"] == 40
        assert row["loss"] == pytest.approx(1 - row["kendall_tau"], abs=1e-6)
    assert backends["full"]["loss"] == 0.0
    assert backends["flash"]["loss"] <= 1e-6
    assert backends["flash"]["ndcg_at_10"] >= 1 - 1e-6
    assert backends["probsparse"]["options"] == {"factor": 5}
    assert backends["performer"]["loss"] > 0.01  # an approximation does move the ranking here
    bf16 = result["precisions"]["bfloat16"]["backends"]
    assert set(bf16) == set(backends)
    assert 0 < bf16["full"]["loss"] < 0.2  # measured against the float32 exact scores


def test_classifier_quality_json(tmp_path: Path) -> None:
    folder = save_tiny_classifier(tmp_path / "tiny-nli", "roberta", num_labels=3)
    out = tmp_path / "q.json"
    main([str(folder), "--pairs-per-band", "20", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["task"] == "classify"
    assert "agreement" in result["metric"]
    flash = result["precisions"]["float32"]["backends"]["flash"]
    assert set(flash) == {"options", "loss", "agreement", "total_variation", "by_tokens"}
    assert flash["loss"] == 0.0 and flash["total_variation"] <= 1e-6
    assert set(flash["by_tokens"]["1-64"]) == {"pairs", "loss", "agreement", "total_variation"}


def test_measure_keeps_every_backend_exact_to_itself(reranker: Path) -> None:
    classifier = TextClassifier.from_folder(reranker)
    result = measure(classifier, [((65, 128), 10)], backends=["flash"], reference="flash")
    backends = result["precisions"]["float32"]["backends"]
    assert list(backends) == ["flash"]
    assert backends["flash"]["kendall_tau"] == 1.0


def test_attnserve_evaluate_routes_a_cross_encoder_folder(
    reranker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.json"
    assert cli_main(["evaluate", str(reranker), "--pairs-per-band", "10", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["task"] == "rerank"
    assert "Kendall tau" in capsys.readouterr().out


def test_evaluate_help_lists_its_flags(reranker: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["evaluate", str(reranker), "--help"])
    shown = capsys.readouterr().out
    for flag in ("--pairs-per-band", "--precisions", "--out"):
        assert flag in shown
