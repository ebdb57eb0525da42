"""``attention: "auto"`` for a SPLADE model: with the folder's ``quality.json`` written by
``attnserve evaluate`` (:mod:`models.text.quality.sparse`), the card shows the figures and
``/embed_sparse`` runs the fastest backend whose measured ranking loss (1 - Kendall's tau of the
dot-product scores) fits the request's budget; without figures it runs exact attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models.quality_file import read_quality
from models.text.sparse import SparseEncoder
from tests.service.helpers import folders_client
from tests.utils.auto_checks import (
    assert_auto_within_losses,
    assert_measured_card,
    auto_body,
    evaluated,
    measured_losses,
)
from tests.utils.tiny_encoders import SAMPLE_TEXTS
from tests.utils.tiny_sparse import save_tiny_splade

pytest.importorskip("sentence_transformers.sparse_encoder")

NAME = "splade-auto"  # served under its folder's name


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evaluated(save_tiny_splade(tmp_path_factory.mktemp("auto") / NAME, "bert"))


def _embed(client: Any, budget: float | None, model: str | None = NAME) -> Any:
    body = auto_body(budget, inputs=SAMPLE_TEXTS)
    if model is not None:
        body["model"] = model
    return client.post("/embed_sparse", json=body)


def test_auto_chooses_within_the_measured_ranking_loss(measured: Path) -> None:
    quality = read_quality(measured / "quality.json")
    assert quality["task"] == "sparse"
    encoder = SparseEncoder.from_folder(measured)
    longest = max(len(ids) for ids in encoder.tokenize(SAMPLE_TEXTS, True))
    losses = measured_losses(quality, longest)
    with folders_client([measured]) as client:
        card = client.get(f"/models/{NAME}").json()
        default = assert_measured_card(card, "sparse", "dot-product")
        assert "top_k_overlap" in card["quality"]["backends"]["performer"]
        assert_auto_within_losses(
            card,
            quality,
            losses,
            lambda budget: _embed(client, budget),
            (0.0, 0.3, 1.0, None),
            lambda r: r.headers["x-attention"],
            default,
        )


def test_auto_without_figures_runs_exact_attention(tmp_path: Path) -> None:
    folder = save_tiny_splade(tmp_path / "splade-plain", "bert", seed=1)
    with folders_client([folder]) as client:
        r = _embed(client, 1.0, model=None)
        assert r.status_code == 200, r.text
        assert r.headers["x-attention"] in ("flash", "full")
