"""Checks shared by the service tests of ``attention: "auto"`` on a measured text model (a
reranker, a multi-vector or a sparse encoder): the card's table holds the measured losses, and
each budget runs a backend whose measured loss fits it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from models.quality_loss import DEFAULT_MAX_QUALITY_LOSS, classifier_losses
from service.cli import run_model_tool

# A backend's measured loss and its per-option detail (``classifier_losses``' values).
Losses = dict[str, tuple[float, dict[str, Any]]]


def assert_auto_within_losses(
    card: dict[str, Any],
    quality: dict[str, Any],
    losses: Losses,
    call: Callable[[float | None], Any],
    budgets: Iterable[float | None],
    ran_of: Callable[[Any], str],
    default_budget: float | None = None,
) -> None:
    """``card``'s auto table for the 64-token band holds ``quality``'s losses there for every
    served backend; ``call(budget)`` answers 200 with a backend (``ran_of(response)``) whose
    loss in ``losses`` fits the budget (``default_budget`` when None) and which the
    ``x-attention-choice`` header names first; a zero budget runs exact attention."""
    table = {row["backend"]: row["quality_loss"] for row in card["auto"]["by_length"]["64"]}
    expected = classifier_losses(quality, 64)
    assert table.keys() == {b for b in expected if b in card["served_backends"]}
    for backend, loss in table.items():
        assert loss == pytest.approx(expected[backend][0], abs=1e-6), backend
    for budget in budgets:
        r = call(budget)
        assert r.status_code == 200, r.text
        ran = ran_of(r)
        limit = default_budget if budget is None else budget
        assert limit is not None and losses[ran][0] <= limit, (budget, ran, losses)
        assert r.headers["x-attention-choice"].startswith(ran), r.headers
    # A zero budget leaves only exact attention.
    assert ran_of(call(0.0)) in ("flash", "full")


def evaluated(folder: Path) -> Path:
    """``folder`` with the ``quality.json`` that ``attnserve evaluate`` writes (20 pairs per
    band)."""
    assert run_model_tool("evaluate", [str(folder), "--pairs-per-band", "20"]) == 0
    return folder


def measured_losses(quality: dict[str, Any], length: int) -> Losses:
    """``quality``'s losses at ``length`` tokens: none for full attention and some for another
    backend, so that a budget has something to choose."""
    losses = classifier_losses(quality, length)
    assert losses["full"][0] == 0.0 and max(loss for loss, _ in losses.values()) > 0.0
    return losses


def assert_measured_card(card: dict[str, Any], task: str, metric: str) -> float:
    """``card`` shows the ``task`` model's measured figures (full attention: Kendall's tau 1)
    and auto's default budget and metric (which names ``metric``); returns that budget."""
    assert card["quality"]["task"] == task
    assert card["quality"]["backends"]["full"]["kendall_tau"] == 1.0
    default = DEFAULT_MAX_QUALITY_LOSS[task]
    assert card["auto"]["default_max_quality_loss"] == default
    assert metric in card["auto"]["quality_metric"]
    return default


def auto_body(budget: float | None, **fields: Any) -> dict[str, Any]:
    """A body of ``fields`` asking for ``attention: "auto"`` (long inputs cut), with
    ``max_quality_loss`` when a ``budget`` is given (None: the server's default)."""
    body: dict[str, Any] = {**fields, "attention": "auto", "truncate": True}
    if budget is not None:
        body["max_quality_loss"] = budget
    return body
