"""Checks shared by the service tests of ``attention: "auto"`` on a measured text model (a
reranker, a multi-vector or a sparse encoder): the card's table holds the measured losses, and
each budget runs a backend whose measured loss fits it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from models.quality_loss import classifier_losses

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
