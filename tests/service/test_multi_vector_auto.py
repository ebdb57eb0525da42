"""``attention: "auto"`` for a multi-vector (ColBERT) model: with the folder's ``quality.json``
written by ``attnserve evaluate`` (:mod:`models.text.quality.multi_vector`), the card shows the
figures and the server picks the fastest backend whose measured ranking loss (1 - Kendall's tau
of the MaxSim scores) fits the request's budget, on ``/v1/rerank`` and on ``/encode`` alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models.quality_file import read_quality
from models.text.multi_vector import MultiVectorModel
from tests.service.helpers import folders_client
from tests.utils.auto_checks import (
    assert_auto_within_losses,
    assert_measured_card,
    auto_body,
    evaluated,
    measured_losses,
)
from tests.utils.tiny_multi_vector import TEXTS, save_tiny_multi_vector

pytest.importorskip("sentence_transformers.multi_vector_encoder")

NAME = "colbert-auto"  # served under its folder's name


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evaluated(save_tiny_multi_vector(tmp_path_factory.mktemp("auto") / NAME, "colbert"))


def _rerank(client: Any, budget: float | None) -> Any:
    return client.post(
        "/v1/rerank", json=auto_body(budget, model=NAME, query=TEXTS[4], documents=TEXTS)
    )


def test_auto_chooses_within_the_measured_maxsim_loss(measured: Path) -> None:
    quality = read_quality(measured / "quality.json")
    assert quality["task"] == "multi_vector"
    model = MultiVectorModel.from_folder(measured)
    rows = model.rows([TEXTS[4]], "query", True) + model.rows(TEXTS, "document", True)
    losses = measured_losses(quality, max(len(r) for r in rows))
    with folders_client([measured]) as client:
        card = client.get(f"/models/{NAME}").json()
        default = assert_measured_card(card, "multi_vector", "MaxSim")
        assert_auto_within_losses(
            card,
            quality,
            losses,
            lambda budget: _rerank(client, budget),
            (0.0, 0.35, 1.0, None),
            lambda r: r.json()["attention"],
            default,
        )
        # /encode budgets the same figures: the token vectors of one call.
        r = client.post(
            "/encode",
            json={
                "model": NAME,
                "inputs": TEXTS,
                "attention": "auto",
                "max_quality_loss": 1.0,
                "truncate": True,
            },
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-attention-choice"].startswith(r.headers["x-attention"])


def test_auto_without_figures_runs_exact_attention(tmp_path: Path) -> None:
    folder = save_tiny_multi_vector(tmp_path / "colbert-plain", "colbert", seed=1)
    with folders_client([folder]) as client:
        r = client.post(
            "/v1/rerank",
            json={"query": TEXTS[4], "documents": TEXTS, "attention": "auto", "truncate": True},
        )
        assert r.status_code == 200, r.text
        assert r.json()["attention"] in ("flash", "full")
