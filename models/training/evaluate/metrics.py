"""Test-set metrics: MSE and MAE on scaled data over every window (no partial batch dropped)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from models.informer.model import Informer
from models.training.data.ett import decoder_input


@torch.no_grad()
def evaluate_loader(
    model: Informer, loader: DataLoader, backend: str, options: dict[str, Any] | None = None
) -> tuple[float, float]:
    """Element-wise mean squared and absolute error over all windows in ``loader``.

    The reference test loader uses ``drop_last=True`` and so skips the last partial batch; every
    window counts here.
    """
    model.eval()
    c = model.config
    se = ae = 0.0
    count = 0
    for x, xm, y, ym in loader:
        pred = model(x, xm, decoder_input(y, c.label_len, c.pred_len), ym, backend, options)
        target = y[:, -c.pred_len :]
        se += float((pred - target).pow(2).sum())
        ae += float((pred - target).abs().sum())
        count += target.numel()
    return se / count, ae / count
