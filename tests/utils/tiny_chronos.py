"""A tiny random-weight Chronos-2 saved as a user's ``save_pretrained`` folder, built with the
``chronos-forecasting`` package's own classes, and its own pipeline's answers (the references
the served forecasts must match).

Weights are drawn at ``initializer_factor=0.2``: the package's default 0.05 leaves attention's
share of the output too small for any backend to differ (every approximate backend then
"matches" flash exactly), while 0.5 and above let the arcsinh output scaling blow the quantiles up
to millions. At 0.2 an approximate backend moves a smooth series' forecast by a few percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

INIT_FACTOR = 0.2
# The pipeline unrolls long horizons with levels 0.1..0.9 and refuses a model without them.
LEVELS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def chronos2_config(**overrides: Any) -> Any:
    """Two encoder blocks of width 32 over patches of 8 steps: 2048 steps of context (256
    patches, so the default-option approximate backends really approximate) and 4 output
    patches (a horizon of 32)."""
    from chronos.chronos2.config import Chronos2CoreConfig

    forecasting: dict[str, Any] = dict(
        context_length=2048,
        input_patch_size=8,
        input_patch_stride=8,
        output_patch_size=8,
        quantiles=list(LEVELS),
        use_reg_token=True,
        use_arcsinh=True,
        max_output_patches=4,
    )
    forecasting.update(overrides)
    return Chronos2CoreConfig(
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        initializer_factor=INIT_FACTOR,
        chronos_config=forecasting,
    )


def build_chronos2(folder: Path, seed: int = 0, **overrides: Any) -> Path:
    """Save a seeded random ``Chronos2Model`` to ``folder``; returns it."""
    from chronos.chronos2 import Chronos2Model

    torch.manual_seed(seed)
    model = Chronos2Model(chronos2_config(**overrides)).eval()
    model.save_pretrained(folder)
    return folder


def pipeline_quantiles(
    folder: Path, inputs: list[dict[str, Any]], horizon: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The package's own answer: per input, quantiles ``[levels, H, c]`` at the model's levels and
    the point forecast ``[H, c]`` (``Chronos2Pipeline.predict_quantiles``, one call)."""
    from chronos.chronos2 import Chronos2Pipeline

    pipeline = Chronos2Pipeline.from_pretrained(folder)
    quantiles, mean = pipeline.predict_quantiles(
        inputs, prediction_length=horizon, quantile_levels=list(pipeline.quantiles)
    )
    return (
        [q.double().numpy().transpose(2, 1, 0) for q in quantiles],  # [c, H, Q] -> [Q, H, c]
        [m.double().numpy().T for m in mean],
    )


def wave(steps: int, seed: int, channels: int = 1, noise: float = 0.3) -> np.ndarray:
    """``[steps, channels]`` sine waves of different periods around 1, with seeded noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[:, None]
    periods = 12.0 + 7.0 * np.arange(channels)[None, :]
    return 1.0 + 3.0 * np.sin(t / periods) + rng.normal(0.0, noise, (steps, channels))
