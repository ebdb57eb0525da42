"""A transformers forecaster in another precision (:mod:`models.precision`).

PatchTST with a point head runs in bfloat16: the class scales each window inside its forward,
in the input's dtype, and every layer is a plain linear, convolution or norm. Distribution heads
and the encoder-decoders (TimeSeriesTransformer, Informer) sample with ``torch.distributions``,
whose float32 code (log-gamma, Student-t) is left as it is: those stay float32.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from models.hf_forecast.families import PatchTSTFamily

if TYPE_CHECKING:
    from models.hf_forecast.forecaster import HFForecaster


def in_precision(forecaster: HFForecaster, precision: str) -> HFForecaster:
    """``forecaster`` in ``precision``: itself in its own, a converted copy in bfloat16 where
    it can run it.

    Raises:
        ValueError: another precision, or a model that runs in float32 only.
    """
    if precision == str(forecaster.dtype).removeprefix("torch."):
        return forecaster
    point_patchtst = isinstance(forecaster.family, PatchTSTFamily) and not forecaster.probabilistic
    if precision != "bfloat16" or not point_patchtst:
        raise ValueError(
            f"{forecaster.model_type} runs in float32 only here, not {precision} (bfloat16: "
            "PatchTST with a point head)"
        )
    model = copy.deepcopy(forecaster.model).to(torch.bfloat16)
    return type(forecaster)(
        forecaster.name, model, forecaster.sidecar, forecaster.directory, forecaster.trained_prob
    )
