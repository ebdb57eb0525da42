"""Which attention backends a model accepts, asked of the model itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from models.attention import BACKENDS, AttentionError


def served_card(
    card: dict[str, Any], aliases: tuple[str, ...], backends: list[str]
) -> dict[str, Any]:
    """A model's own card plus what serving adds: its other names and the backends it serves."""
    return {**card, "aliases": list(aliases), "served_backends": backends}


def accepted_backends(check: Callable[[str, dict[str, Any] | None], Any]) -> list[str]:
    """The backends (in registry order) that ``check(backend, None)`` accepts on this model."""
    accepted = []
    for backend in BACKENDS:
        try:
            check(backend, None)
        except AttentionError:
            continue
        accepted.append(backend)
    return accepted


def measured_losses(
    figures: Callable[[str], Mapping[str, tuple[float, dict[str, Any]]]],
    precisions: Iterable[str],
    served: list[str],
    call_of: Callable[[str, dict[str, Any], str], Any],
) -> dict[Any, float]:
    """Quality loss per call: ``figures(precision)`` gives each backend's measured loss and the
    options it was measured at (:mod:`models.quality_loss`); ``call_of(backend, options,
    precision)`` makes the call it stands for. Backends this model does not serve are left out."""
    return {
        call_of(backend, options, precision): loss
        for precision in precisions
        for backend, (loss, options) in figures(precision).items()
        if backend in served
    }
