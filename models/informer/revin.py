"""Reversible instance normalisation (Kim et al., "Reversible Instance Normalization for Accurate
Time-Series Forecasting against Distribution Shift", ICLR 2022).

Each input window is normalised by its own per-channel mean and std, an affine map is learned per
channel, and the forecast is mapped back with the same statistics. Not part of the Informer paper;
it removes most of ETTh1's train/test level shift.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RevIN(nn.Module):
    """``normalize(x)`` stores the window statistics; ``denormalize(y)`` applies them in reverse."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Per-window, per-channel mean and std: ``[b, n, c] -> [b, 1, c]`` each."""
        mean = x.mean(dim=1, keepdim=True).detach()
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        return mean, std

    def normalize(self, x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
        return (x - mean) / std * self.weight + self.bias

    def denormalize(self, y: Tensor, mean: Tensor, std: Tensor) -> Tensor:
        # eps² keeps the division finite if a weight is driven to zero.
        return (y - self.bias) / (self.weight + self.eps * self.eps) * std + mean
