"""Informer-family long-sequence forecasters (Zhou et al., AAAI 2021), shipped for ETTh1 and
trainable on any CSV.

Public surface for the service: :class:`InformerForecaster`, :class:`ForecastWindow`,
:class:`Forecast`, :func:`shipped_models`. Loader: :mod:`.checkpoint` (``config.json`` +
``model.safetensors``). Training: ``attnserve train`` (:mod:`models.training.informer_train`);
evaluation: ``attnserve evaluate`` (:mod:`models.training.evaluate.informer`).
"""

from models.informer.config import PRESETS, InformerConfig, preset
from models.informer.forecaster import (
    Forecast,
    ForecastWindow,
    InformerForecaster,
    shipped_models,
)
from models.informer.model import Informer, attention_plan

__all__ = [
    "PRESETS",
    "Forecast",
    "ForecastWindow",
    "Informer",
    "InformerConfig",
    "InformerForecaster",
    "attention_plan",
    "preset",
    "shipped_models",
]
