"""Which attention backends a model accepts, asked of the model itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.attention import BACKENDS, AttentionError


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
