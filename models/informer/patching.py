"""Patch tokens and channel independence (Nie et al., "A Time Series is Worth 64 Words",
ICLR 2023, PatchTST Sec. 3.1).

A token is a patch of ``p`` consecutive steps instead of one step, so the attention sees
``~n/s`` tokens for a context of ``n`` steps (stride ``s``): a longer history at the same cost.
With channel independence every channel is its own univariate series sharing the weights,
which PatchTST found to generalise better than mixing all channels into each token.

Dimension legend: ``b`` batch, ``n`` steps, ``t`` tokens, ``p`` patch length, ``c`` channels,
``f`` calendar features, ``d`` model width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.informer.embed import sinusoid_table


def _pad_end(x: Tensor, steps: int) -> Tensor:
    """Repeat the last step ``steps`` times (``ReplicationPad1d((0, stride))`` in PatchTST)."""
    return torch.cat([x, x[:, -1:].expand(-1, steps, -1)], dim=1) if steps else x


class PatchEmbedding(nn.Module):
    """Patches of ``p`` steps (all channels) -> ``d``, plus sinusoidal position and, unless
    ``n_marks`` is 0, the calendar features of each patch's first step.

    The encoder uses overlapping patches (stride < p) with the end padded as in PatchTST; the
    decoder uses back-to-back patches (stride = p) over a length the caller made a multiple of p.
    """

    def __init__(
        self,
        patch_len: int,
        stride: int,
        c_in: int,
        n_marks: int,
        d_model: int,
        dropout: float,
        pad_end: bool,
    ) -> None:
        super().__init__()
        self.patch_len, self.stride, self.pad_end, self.d_model = (
            patch_len,
            stride,
            pad_end,
            d_model,
        )
        self.value = nn.Linear(patch_len * c_in, d_model)
        self.calendar = nn.Linear(n_marks, d_model, bias=False) if n_marks else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, marks: Tensor) -> Tensor:  # [b,n,c], [b,n,f] -> [b,t,d]
        pad = self.stride if self.pad_end else 0
        patches = _pad_end(x, pad).unfold(1, self.patch_len, self.stride)  # [b, t, c, p]
        tokens = self.value(patches.flatten(2))
        tokens = tokens + sinusoid_table(tokens.shape[1], self.d_model, x.device).to(x.dtype)
        if self.calendar is not None:
            first = _pad_end(marks, pad).unfold(1, self.patch_len, self.stride)[..., 0]  # [b,t,f]
            tokens = tokens + self.calendar(first)
        return self.dropout(tokens)


def pad_to_patches(x: Tensor, marks: Tensor, patch_len: int) -> tuple[Tensor, Tensor]:
    """Decoder input padded at the end to a whole number of patches: zeros for the values (they
    are placeholders anyway), the last calendar row repeated for the marks."""
    extra = -x.shape[1] % patch_len
    if not extra:
        return x, marks
    return F.pad(x, (0, 0, 0, extra)), _pad_end(marks, extra)


def fold_channels(x: Tensor) -> Tensor:
    """``[b, n, c] -> [b·c, n, 1]``: each channel becomes its own series."""
    b, n, c = x.shape
    return x.transpose(1, 2).reshape(b * c, n, 1)


def unfold_channels(x: Tensor, channels: int) -> Tensor:
    """``[b·c, n, 1] -> [b, n, c]``, the inverse of :func:`fold_channels`."""
    bc, n, _ = x.shape
    return x.reshape(bc // channels, channels, n).transpose(1, 2)
