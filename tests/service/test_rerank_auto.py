"""``attention: "auto"`` for a reranker: with the folder's ``quality.json`` written by
``attnserve evaluate``, the server picks the fastest backend whose measured ranking loss fits the
request's budget, and the exact one when none does (or when nothing was measured)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models.quality_file import read_quality
from models.text.quality.classifier import main as evaluate
from tests.service.helpers import folders_client
from tests.utils.auto_checks import assert_auto_within_losses, auto_body, measured_losses
from tests.utils.tiny_classifiers import DOCUMENTS, QUERIES, save_tiny_classifier


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = save_tiny_classifier(
        tmp_path_factory.mktemp("auto") / "rerank-auto", "roberta", 1, cross_encoder=True
    )
    evaluate([str(folder), "--pairs-per-band", "20"])
    return folder


def _auto(client: Any, budget: float | None) -> Any:
    return client.post(
        "/v1/rerank", json=auto_body(budget, query=QUERIES[0], documents=DOCUMENTS[:3])
    )


def test_auto_chooses_within_the_measured_ranking_loss(measured: Path) -> None:
    from models.text.classifier import TextClassifier

    quality = read_quality(measured / "quality.json")
    assert quality["task"] == "rerank"
    rows = TextClassifier.from_folder(measured).tokenize(
        [(QUERIES[0], d) for d in DOCUMENTS[:3]], truncate=True
    )
    losses = measured_losses(quality, max(len(r) for r in rows))
    with folders_client([measured]) as client:
        card = client.get("/models/rerank-auto").json()
        assert card["quality"]["backends"].keys() >= {"flash", "nystrom"}
        assert_auto_within_losses(
            card,
            quality,
            losses,
            lambda budget: _auto(client, budget),
            (0.0, 0.2, 1.0),
            lambda r: r.json()["attention"],
        )


def test_auto_without_figures_runs_exact_attention(tmp_path: Path) -> None:
    folder = save_tiny_classifier(tmp_path / "rerank-plain", "bert", 1, cross_encoder=True)
    with folders_client([folder]) as client:
        r = _auto(client, 1.0)
        assert r.status_code == 200, r.text
        assert r.json()["attention"] in ("flash", "full")
