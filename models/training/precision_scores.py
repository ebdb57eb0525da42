"""``attnserve evaluate --precisions``: a forecaster's backends scored with its network in other
precisions (:mod:`models.precision`), for ``quality.json`` → ``precisions``.

Each entry has the shape of the float32 ``backends`` entries and is read against float32's exact
attention (:mod:`models.quality_loss`). A run that scores that exact reference again drops the
precisions scored before (the weights may have changed since): the ones it names are scored
fresh, the others are gone and the command says so. A run that leaves the reference alone (only
approximations or variants) keeps them. Used for our Informer checkpoints and for transformers
forecaster folders alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from models.quality_loss import EXACT, carried_precisions, dropped_precisions_note


def score_precisions(
    quality: Mapping[str, Any],
    default_backend: str,
    backends: list[str],
    precisions: tuple[str, ...],
    score_in: Callable[[str, str], dict[str, Any]],
) -> dict[str, Any]:
    """``quality``'s ``precisions`` figures with ``backends`` (or, when none, ``default_backend``)
    re-scored in each of ``precisions`` by ``score_in(precision, backend)`` (float32 is the
    ``backends`` section itself and is skipped). When ``backends`` holds an exact backend (float32's
    reference is measured again) the old figures are dropped first (see the module doc)."""
    remeasured = any(b in EXACT for b in backends)
    by_precision, dropped = carried_precisions(quality, precisions, remeasured)
    if dropped:
        print(dropped_precisions_note(dropped), flush=True)
    for precision in precisions:
        if precision == "float32":
            continue
        section = dict(by_precision.get(precision) or {})
        entries = dict(section.get("backends") or {})
        for backend in backends or [default_backend]:
            entries[backend] = score_in(precision, backend)
        by_precision[precision] = {**section, "backends": entries}
    return by_precision
