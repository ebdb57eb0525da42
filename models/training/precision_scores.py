"""``attnserve evaluate --precisions``: a checkpoint's backends scored with its network in other
precisions (:mod:`models.precision`), for ``quality.json`` → ``precisions``.

Each entry has the shape of the float32 ``backends`` entries and is read against float32's exact
attention (:mod:`models.quality_loss`); precisions scored before and not named again are kept
(the float32 reference they were measured against has not changed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.informer.forecaster import InformerForecaster


def score_precisions(
    forecaster: InformerForecaster,
    backends: list[str],
    precisions: tuple[str, ...],
    score: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """The checkpoint's ``precisions`` figures with ``backends`` (or, when none, its default
    backend) re-scored in each of ``precisions``: ``score(backend, options, model, tag)`` as
    :func:`models.training.informer_evaluate.evaluate_checkpoint` scores float32."""
    by_precision: dict[str, Any] = dict(forecaster.quality.get("precisions") or {})
    for precision in precisions:
        if precision == "float32":
            continue
        model = forecaster.with_precision(precision).model
        section = dict(by_precision.get(precision) or {})
        entries = dict(section.get("backends") or {})
        for backend in backends or [forecaster.default_attention]:
            entries[backend] = score(backend, None, model, f"@{precision}")
        by_precision[precision] = {**section, "backends": entries}
    return by_precision
