"""The model card of a transformers forecaster: what ``GET /models`` shows."""

from __future__ import annotations

from typing import Any

from models.hf_forecast.families import PatchTSTFamily
from models.informer.model import backend_cards
from models.quality_file import backends_of, card_quality


def describe(forecaster: Any) -> dict[str, Any]:
    """Everything ``GET /models`` shows about a :class:`~models.hf_forecast.forecaster.HFForecaster`."""
    backends = backend_cards(forecaster.plan, backends_of(forecaster.quality))
    f = forecaster.family
    head = (
        {
            "kind": "distribution",
            "distribution": forecaster.model.config.distribution_output,
            "samples": f.samples,
            "mean": "analytic" if isinstance(f, PatchTSTFamily) else f"of {f.samples} samples",
            "quantiles": f"from {f.samples} samples seeded per series (request field seed, default 0)",
        }
        if forecaster.probabilistic
        else {"kind": "point", "quantiles": "not available (trained with MSE)"}
    )
    card: dict[str, Any] = {
        "name": forecaster.name,
        "task": "forecast",
        "source": "transformers",
        "architecture": f.architecture,
        "class": type(forecaster.model).__name__,
        "context": forecaster.context,
        "horizon": forecaster.horizon,
        "channels": forecaster.channels,
        "freq": forecaster.freq,
        "timestamps": "optional; when given, evenly spaced, and the forecast continues them",
        "units": "original (the model scales each window itself)",
        "default_attention": forecaster.default_attention,
        "head": head,
        "parameters": sum(p.numel() for p in forecaster.model.parameters()),
        "backends": backends,
        "quality": card_quality(forecaster.quality),
    }
    if f.time_feature_width:
        card["time_features"] = f.time_feature_width
    if getattr(f, "static_categorical", 0):
        card["static_categorical"] = list(f.cardinality)
    if getattr(f, "static_real", 0):
        card["static_real"] = f.static_real
    if forecaster.sidecar.training:
        card["training"] = {k: v for k, v in forecaster.sidecar.training.items() if k != "history"}
    return card
