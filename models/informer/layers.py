"""Informer blocks: multi-head attention around ``attend``, encoder/decoder layers, distilling.

Structure follows Zhou et al. 2021 (Fig. 2, Sec. 3.2 eq. 5) and Informer2020 ``models/attn.py``
(``AttentionLayer``), ``models/encoder.py`` (``EncoderLayer``, ``ConvLayer``) and
``models/decoder.py`` (``DecoderLayer``). The attention core has no weights: each layer calls
``models.attention.attend`` with whatever backend the caller picked for this forward pass, so
one checkpoint serves every backend.

Dimension legend: ``b`` batch, ``n``/``m`` query/key steps, ``h`` heads, ``e`` head dim,
``d`` model width.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.attention import attend


class AttentionLayer(nn.Module):
    """Q/K/V projections, ``attend`` with a per-call backend, output projection."""

    def __init__(self, d_model: int, n_heads: int, mix: bool = False) -> None:
        super().__init__()
        self.n_heads, self.mix = n_heads, mix
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(
        self,
        x_q: Tensor,  # [b, n, d]
        x_kv: Tensor,  # [b, m, d]
        backend: str,
        options: dict[str, Any],
        causal: bool = False,
    ) -> Tensor:  # [b, n, d]
        b, n, d = x_q.shape
        m, h = x_kv.shape[1], self.n_heads
        q = self.query(x_q).view(b, n, h, d // h).transpose(1, 2)  # [b, h, n, e]
        k = self.key(x_kv).view(b, m, h, d // h).transpose(1, 2)  # [b, h, m, e]
        v = self.value(x_kv).view(b, m, h, d // h).transpose(1, 2)
        out = attend(q, k, v, backend=backend, causal=causal, **options)  # [b, h, n, e]
        # mix=True is a reference quirk (AttentionLayer(mix=True)): the head-major buffer is read
        # as [b, n, h*e] without moving the heads back beside each step.
        merged = out.reshape(b, n, d) if self.mix else out.transpose(1, 2).reshape(b, n, d)
        return self.out(merged)


class FeedForward(nn.Module):
    """Position-wise feed-forward as two width-1 convolutions (reference layout).

    The weights keep the reference's ``Conv1d`` shape (so checkpoints load unchanged), but the
    forward runs them as plain matrix products: a width-1 convolution is exactly a linear map
    per step, and it skips two transposes and the convolution kernel's set-up (on CPU, ~4x less
    time for this block at batch 32).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(d_model, d_ff, 1)
        self.conv2 = nn.Conv1d(d_ff, d_model, 1)
        self.dropout = nn.Dropout(dropout)
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, x: Tensor) -> Tensor:  # [b, n, d] -> [b, n, d]
        w1, w2 = self.conv1.weight.squeeze(-1), self.conv2.weight.squeeze(-1)
        y = self.dropout(self.act(F.linear(x, w1, self.conv1.bias)))
        return self.dropout(F.linear(y, w2, self.conv2.bias))


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each with a residual and post-LayerNorm."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str):
        super().__init__()
        self.attention = AttentionLayer(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, backend: str, options: dict[str, Any]) -> Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, x, backend, options)))
        return self.norm2(x + self.ff(x))


class DistilLayer(nn.Module):
    """Self-attention distilling (paper eq. 5): Conv1d(k=3) -> BatchNorm -> ELU -> MaxPool(s=2).

    Halves the sequence: ``[b, n, d] -> [b, ceil(n/2), d]``.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, 3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(d_model)
        self.pool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        if self.training or torch.is_grad_enabled():
            y = self.pool(F.elu(self.norm(self.conv(x.transpose(1, 2)))))
            return y.transpose(1, 2).contiguous()  # [b, n, d] rows for the next layer's GEMMs
        return self._infer(x)

    def _infer(self, x: Tensor) -> Tensor:
        """The same map in inference, in the ``[b, n, d]`` layout throughout: the circular
        width-3 convolution as one GEMM over the three neighbouring rows (im2col) with the
        BatchNorm's running statistics folded into its weights, ELU in place, and the max-pool
        as maxima of even and odd rows. The reference layout transposes to ``[b, d, n]`` for the
        convolution and pads a copy for the circular border, and back for the next layer.
        """
        b, n, d = x.shape
        conv, bn = self.conv, self.norm
        assert bn.running_var is not None and bn.running_mean is not None
        scale = torch.rsqrt(bn.running_var + bn.eps)
        if bn.weight is not None:
            scale = scale * bn.weight
        # [o, i, k] -> [o, k·i], matching the columns below; BatchNorm folded: y·s + (β - μ·s)
        weight = (conv.weight * scale[:, None, None]).transpose(1, 2).reshape(d, 3 * d)
        bias = -bn.running_mean * scale
        if conv.bias is not None:
            bias = bias + conv.bias * scale
        if bn.bias is not None:
            bias = bias + bn.bias
        padded = torch.cat([x[:, -1:], x, x[:, :1]], dim=1)  # circular border: [b, n+2, d]
        cols = padded.unfold(1, 3, 1).transpose(2, 3).reshape(b * n, 3 * d)  # [b·n, k·i]
        y = F.elu_(torch.addmm(bias, cols, weight.t())).view(b, n, d)
        # MaxPool1d(3, stride 2, padding 1): out[i] = max(y[2i-1], y[2i], y[2i+1]), rows outside
        # ignored (its padding is -inf); an odd length gets one -inf row to pair the last.
        if n % 2:
            y = torch.cat([y, y.new_full((b, 1, d), -torch.inf)], dim=1)
        even, odd = y[:, 0::2], y[:, 1::2]
        out = torch.maximum(even, odd)  # [b, ceil(n/2), d]
        out[:, 1:] = torch.maximum(out[:, 1:], odd[:, :-1])
        return out


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder, feed-forward; post-LayerNorm."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str, mix: bool
    ) -> None:
        super().__init__()
        self.self_attention = AttentionLayer(d_model, n_heads, mix=mix)
        self.cross_attention = AttentionLayer(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,  # [b, n_dec, d]
        memory: Tensor,  # [b, n_enc, d]
        self_backend: tuple[str, dict[str, Any]],
        cross_backend: tuple[str, dict[str, Any]],
    ) -> Tensor:
        x = self.norm1(x + self.dropout(self.self_attention(x, x, *self_backend, causal=True)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, memory, *cross_backend)))
        return self.norm3(x + self.ff(x))
