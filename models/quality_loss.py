"""Each attention backend's (and option variant's) measured quality loss against exact attention,
read from a model's shipped quality figures: what ``attention: "auto"`` budgets against (:mod:`service.engine.auto_attention`).

Pure arithmetic over the figures (no torch): a backend without a figure has no loss here, so it
is never chosen on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXACT = ("flash", "full")
# The budget a request gets when it names none, per task: a forecast may be up to 5 % worse in
# test MSE than exact attention; an embedding must keep a mean cosine of 0.99 to the exact one.
DEFAULT_MAX_QUALITY_LOSS = {"forecast": 0.05, "encode": 0.01}


def variant_label(backend: str, options: Mapping[str, Any] | None = None) -> str:
    """``performer`` at the defaults, ``performer(num_features=16)`` with options changed: how
    tables, benchmarks and the ``x-attention-choice`` header name a variant."""
    if not options:
        return backend
    return f"{backend}({','.join(f'{k}={v}' for k, v in sorted(options.items()))})"


def _relative(entry: Mapping[str, Any], overall: Any) -> float | None:
    """An entry's MSE over the linear baseline's on the windows it was scored on."""
    linear = entry.get("linear_mse", overall)
    mse = entry.get("mse")
    return None if not linear or mse is None else float(mse) / float(linear)


def _exact_reference(quality: Mapping[str, Any]) -> float | None:
    backends = quality.get("backends") or {}
    overall = (quality.get("linear_baseline") or {}).get("mse")
    return next((_relative(backends[n], overall) for n in EXACT if n in backends), None)


def forecast_losses(quality: Mapping[str, Any]) -> dict[str, float]:
    """Relative test-MSE increase of each backend at its default options over exact attention,
    from a checkpoint's ``quality.json`` (:mod:`models.training.informer_evaluate`); ``{}`` without an
    exact figure.

    Backends may have been scored on different windows (the default backend on all of them,
    the others on every k-th, each beside the linear baseline's MSE on its own windows), so each
    MSE is first divided by that linear MSE: ``loss = (mse_b / lin_b) / (mse_exact / lin_exact) - 1``.
    On the same windows this is ``mse_b / mse_exact - 1``.
    """
    reference = _exact_reference(quality)
    if not reference:
        return {}
    overall = (quality.get("linear_baseline") or {}).get("mse")
    losses = {}
    for name, entry in (quality.get("backends") or {}).items():
        ratio = _relative(entry, overall)
        if ratio is not None:
            losses[name] = 0.0 if name in EXACT else ratio / reference - 1.0
    return losses


def forecast_variant_losses(quality: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], float]]:
    """``(backend, options, loss)`` for each backend scored at options other than its defaults
    (``quality.json`` → ``variants``, written by ``attnserve evaluate --variants``), the loss
    worked out as in :func:`forecast_losses`; ``[]`` without an exact figure."""
    reference = _exact_reference(quality)
    if not reference:
        return []
    overall = (quality.get("linear_baseline") or {}).get("mse")
    out = []
    for entry in quality.get("variants") or []:
        ratio = _relative(entry, overall)
        if ratio is not None:
            out.append((str(entry["backend"]), dict(entry["options"]), ratio / reference - 1.0))
    return out


def embedding_losses(
    quality: Mapping[str, Any], length: int
) -> dict[str, tuple[float, dict[str, Any]]]:
    """``1 - mean cosine`` to the exact embedding per backend, over the measured texts whose
    token count falls in the same band as ``length`` (``models/text/quality.json``), with the
    options the figure was measured at. ``{}`` when no band covers ``length``."""
    losses: dict[str, tuple[float, dict[str, Any]]] = {}
    reference = quality.get("reference")
    for name, entry in (quality.get("backends") or {}).items():
        for band, figures in (entry.get("by_tokens") or {}).items():
            low, _, high = str(band).partition("-")
            if int(low) <= length <= int(high):
                loss = max(0.0, 1.0 - float(figures["mean_cosine"]))
                losses[name] = (loss, dict(entry.get("options") or {}))
    if reference and losses:
        losses[str(reference)] = (0.0, {})
    return losses
