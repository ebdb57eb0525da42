"""Informer input embedding: values (Conv1d) + sinusoidal position + calendar features.

Zhou et al. 2021, Sec. 3 and Appendix B ("uniform input representation"); Informer2020
``models/embed.py`` (``TokenEmbedding``, ``PositionalEmbedding``, ``TimeFeatureEmbedding``).

Dimension legend: ``b`` batch, ``n`` time steps, ``c`` channels, ``f`` calendar features,
``d`` model width.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """Each step's channel vector -> ``d`` with a width-3 circular Conv1d over time."""

    def __init__(self, c_in: int, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, d_model, 3, padding=1, padding_mode="circular", bias=False)
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_in", nonlinearity="leaky_relu")

    def forward(self, x: Tensor) -> Tensor:  # [b, n, c] -> [b, n, d]
        # Contiguous in [b, n, d]: left as the convolution's transposed view, every sum after it
        # keeps that layout and each attention projection pays a copy instead of one GEMM.
        return self.conv(x.transpose(1, 2)).transpose(1, 2).contiguous()


@functools.lru_cache(maxsize=32)
def sinusoid_table(length: int, d_model: int, device: torch.device | None = None) -> Tensor:
    """Fixed positional encoding ``[length, d]`` (Vaswani et al. 2017, Sec. 3.5); computed once
    per (length, width, device): a constant, never written, made outside inference mode so that
    training can use it too."""
    with torch.inference_mode(False), torch.no_grad():
        return _sinusoid(length, d_model, device)


def _sinusoid(length: int, d_model: int, device: torch.device | None) -> Tensor:
    pos = torch.arange(length, dtype=torch.float32, device=device)[:, None]
    div = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32, device=device)
        * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return table


class DataEmbedding(nn.Module):
    """``value(x) + position + calendar(marks)``, then dropout. Any length works (the position
    table is computed on the fly, so a longer context than trained still runs)."""

    def __init__(self, c_in: int, n_marks: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.d_model = d_model
        self.value = TokenEmbedding(c_in, d_model)
        # embed='timeF'; none when n_marks is 0 (InformerConfig.calendar off)
        self.calendar = nn.Linear(n_marks, d_model, bias=False) if n_marks else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, marks: Tensor) -> Tensor:  # [b,n,c], [b,n,f] -> [b,n,d]
        pos = sinusoid_table(x.shape[1], self.d_model, x.device).to(x.dtype)
        out = self.value(x) + pos[None]
        return self.dropout(out if self.calendar is None else out + self.calendar(marks))
