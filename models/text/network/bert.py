"""A compact BERT-family encoder whose self-attention is any backend from ``models.attention``.

BERT (Devlin et al., "BERT", NAACL 2019; Vaswani et al. 2017, section 3.1) and the variants in
:mod:`models.text.network.config` (RoBERTa's offset positions, MPNet's relative bias, ModernBERT's
pre-LN / rotary / GeGLU / sliding-window layers), with the query/key/value projections fused
into one matmul. The attention core has no weights, so one loaded copy of the projections serves
every backend; the backend is picked per forward call. Local (sliding-window) layers always run
the exact banded kernel (:mod:`models.attention.sliding_window`): it already costs O(n·w), so
approximating it would save nothing; the backend applies to the global layers.

Tokens travel *packed*: the linear layers, LayerNorms and GELUs run on ``[t, c]``, only the real
tokens of the batch, and only the attention core sees a padded ``[b, h, n, d]`` block plus a key
padding mask (the "unpadded" layout of TEI / FlashAttention varlen). Padding then costs nothing
outside attention, and each text's tokens meet exactly the same arithmetic whatever batch they
are in, apart from the attention kernel itself.

Dimension legend:
    b  texts in the batch     n  padded length        t  real tokens in the batch (sum of lengths)
    c  hidden size            h  heads                d  head dim (c = h * d)      f  FFN width
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import models.text.network.fused_linear as fused_linear
import models.text.network.serial as serial
from models.attention import attend
from models.attention.sliding_window import sliding_window_attention
from models.text.network.config import BertConfig
from models.text.network.pooling import Pooling, pool
from models.text.network.positions import (
    apply_rotary,
    relative_bias,
    relative_buckets,
    rotary_tables,
)


@dataclass(frozen=True)
class PackedBatch:
    """Where each real token of a padded ``[b, n]`` batch sits; built once per batch.

    Attributes:
        input_ids: ``[t]`` token ids, text after text.
        positions: ``[t]`` position of each token inside its text.
        rows: ``[t]`` which text (``0..b-1``) each token belongs to.
        lengths: ``[b]`` tokens per text.
        padded_length: ``n``, the attention block length (>= the longest text).
        key_padding_mask: bool ``[b, n]``, True = real token; None when no row is padded.
        token_types: ``[t]`` segment of each token (0: first text, 1: second of a pair); None:
            every token is segment 0 (single texts).
        pad_source: ``[b * n]`` the packed token each padded slot is read from by :meth:`pad`
            (a padded slot reads its text's first token); None when nothing is padded.
        slots: ``[t]`` each token's slot in the flattened ``[b * n]`` block, for :meth:`unpad`;
            None when nothing is padded.
    """

    input_ids: Tensor
    positions: Tensor
    rows: Tensor
    lengths: Tensor
    padded_length: int
    key_padding_mask: Tensor | None
    token_types: Tensor | None = None
    pad_source: Tensor | None = None
    slots: Tensor | None = None

    @classmethod
    def from_lists(
        cls,
        token_ids: list[list[int]],
        padded_length: int,
        device: torch.device,
        token_types: list[list[int]] | None = None,
    ) -> PackedBatch:
        """Pack a list of token-id lists (each non-empty, none longer than ``padded_length``),
        with each token's segment when ``token_types`` is given (text pairs)."""
        lengths_list = [len(ids) for ids in token_ids]
        flat = [tok for ids in token_ids for tok in ids]
        lengths = torch.tensor(lengths_list, dtype=torch.long)
        rows = torch.repeat_interleave(torch.arange(len(token_ids)), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        positions = torch.arange(len(flat)) - starts[rows]
        mask = pad_source = slots = None
        if min(lengths_list) < padded_length:
            slot = torch.arange(padded_length)[None, :]  # [1, n]
            real = slot < lengths[:, None]  # [b, n]
            pad_source = (starts[:, None] + torch.where(real, slot, 0)).reshape(-1).to(device)
            slots = (rows * padded_length + positions).to(device)
            mask = real.to(device)
        return cls(
            input_ids=torch.tensor(flat, dtype=torch.long, device=device),
            positions=positions.to(device),
            rows=rows.to(device),
            lengths=lengths.to(device),
            padded_length=padded_length,
            key_padding_mask=mask,
            token_types=None
            if token_types is None
            else torch.tensor([s for types in token_types for s in types], device=device),
            pad_source=pad_source,
            slots=slots,
        )

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    def pad(self, x: Tensor) -> Tensor:
        """``[t, k] -> [b, n, k]`` (a view when nothing is padded).

        A padded position holds a copy of its text's first token rather than zeros: one gather,
        without first zero-filling the block. Every attention backend leaves padded keys out by
        the key padding mask (a masked score is -inf or its weight 0, and a finite value times
        0 is 0), and padded queries' rows are dropped by :meth:`unpad`, so what they hold never
        reaches a real token; it must only be finite, which a real token's values are.
        """
        b, n, k = self.batch_size, self.padded_length, x.shape[-1]
        if self.pad_source is None:
            return x.view(b, n, k)
        return x.index_select(0, self.pad_source).view(b, n, k)

    def unpad(self, x: Tensor) -> Tensor:
        """``[b, n, ...] -> [t, ...]``: the real positions only."""
        flat = x.reshape(-1, *x.shape[2:])
        if self.slots is None:
            return flat
        return flat.index_select(0, self.slots)


class Embeddings(nn.Module):
    """Word (+ absolute position) (+ segment-0) embeddings, then LayerNorm (BERT section 3.2)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config.hidden_size
        self.offset = config.position_offset
        # Uninitialised tables (the checkpoint fills them): nn.Embedding's own random init calls
        # normal_, which on the meta device imports torch._dynamo and costs ~1 s of start-up.
        self.word = nn.Embedding.from_pretrained(torch.empty(config.vocab_size, c))
        self.position = (
            nn.Embedding.from_pretrained(torch.empty(config.max_position_embeddings, c))
            if config.absolute_positions
            else None
        )
        self.token_type = (
            nn.Embedding.from_pretrained(torch.empty(config.type_vocab_size, c))
            if config.type_vocab_size
            else None
        )
        self.norm = nn.LayerNorm(c, eps=config.layer_norm_eps, bias=config.norm_bias)

    def forward(
        self, input_ids: Tensor, positions: Tensor, token_types: Tensor | None = None
    ) -> Tensor:
        """``[t] ids, [t] positions -> [t, c]``; ``token_types`` ``[t]`` gives each token's
        segment (None: all segment 0, single sentences)."""
        x = self.word(input_ids)
        if self.position is not None:
            x = x + self.position(positions + self.offset)
        if self.token_type is not None:
            segments = (
                self.token_type.weight[0] if token_types is None else self.token_type(token_types)
            )
            x = x + segments
        return self.norm(x)


def _activation(name: str, hidden: Tensor) -> Tensor:
    if name == "gelu_tanh":
        return F.gelu(hidden, approximate="tanh")
    if name == "relu":
        return F.relu(hidden)
    if name == "silu":
        return F.silu(hidden)
    return F.gelu(hidden)


@dataclass(frozen=True)
class LayerContext:
    """What every layer of one forward pass shares: the batch layout, the backend, and the
    position terms built once (rotary tables by base, the relative score bias)."""

    batch: PackedBatch
    backend: str
    options: Mapping[str, Any]
    rotary: Mapping[float, Tensor]
    bias: Tensor | None


class EncoderLayer(nn.Module):
    """One transformer layer. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    Pre-LN (ModernBERT): x = x + Attn(LN(x)); x = x + FFN(LN(x))."""

    def __init__(self, config: BertConfig, index: int) -> None:
        super().__init__()
        c, eps, norm_bias = config.hidden_size, config.layer_norm_eps, config.norm_bias
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.pre_norm, self.glu, self.activation = config.pre_norm, config.glu, config.activation
        self.window = config.window(index)
        self.theta = config.rotary_thetas[index] if config.rotary_thetas else None
        self.qkv = nn.Linear(c, 3 * c, bias=config.bias)  # rows: [query; key; value]
        self.attn_out = nn.Linear(c, c, bias=config.bias)
        # ModernBERT's first layer reads the embeddings' own norm: no norm of its own.
        skip_norm = config.pre_norm and index == 0
        self.attn_norm = nn.Identity() if skip_norm else nn.LayerNorm(c, eps=eps, bias=norm_bias)
        self.ffn_in = nn.Linear(c, config.ffn_in_size, bias=config.bias)
        self.ffn_out = nn.Linear(config.intermediate_size, c, bias=config.bias)
        self.ffn_norm = nn.LayerNorm(c, eps=eps, bias=norm_bias)

    def attention(self, x: Tensor, ctx: LayerContext) -> Tensor:
        """``[t, c] -> [t, c]``: self-attention output before the output projection."""
        batch = ctx.batch
        b, n, h, d = batch.batch_size, batch.padded_length, self.heads, self.head_dim
        qkv = batch.pad(fused_linear.linear(x, self.qkv))  # [t, c] -> [b, n, 3c]
        q, k, v = qkv.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x [b, h, n, d]
        if self.theta is not None:
            q, k = apply_rotary(q, ctx.rotary[self.theta]), apply_rotary(k, ctx.rotary[self.theta])
        if self.window is not None:
            a = sliding_window_attention(q, k, v, batch.key_padding_mask, self.window)
        else:
            a = attend(
                q,
                k,
                v,
                backend=ctx.backend,
                key_padding_mask=batch.key_padding_mask,
                attn_bias=ctx.bias,
                **ctx.options,
            )
        return batch.unpad(a.transpose(1, 2)).reshape(-1, h * d)  # [b, h, n, d] -> [t, c]

    def feed_forward(self, x: Tensor) -> Tensor:
        """``[t, c] -> [t, f]``: the activated (or gated) inner states."""
        if self.glu:  # GeGLU: act(x W_u) * (x W_g), one product for both halves
            inner, gate = fused_linear.linear(x, self.ffn_in).chunk(2, dim=-1)
            return _activation(self.activation, inner) * gate
        if self.activation == "gelu":
            # Exact (erf) GELU, as BERT's "gelu"; the tanh approximation would drift.
            return fused_linear.linear_gelu(x, self.ffn_in)
        return _activation(self.activation, fused_linear.linear(x, self.ffn_in))

    def forward(self, x: Tensor, ctx: LayerContext) -> Tensor:
        """``[t, c] -> [t, c]``; may overwrite ``x`` (see ``fused_linear.residual_linear``)."""
        if self.pre_norm:
            x = fused_linear.residual_linear(
                x, self.attention(self.attn_norm(x), ctx), self.attn_out
            )
            return fused_linear.residual_linear(
                x, self.feed_forward(self.ffn_norm(x)), self.ffn_out
            )
        x = self.attn_norm(fused_linear.residual_linear(x, self.attention(x, ctx), self.attn_out))
        return self.ffn_norm(fused_linear.residual_linear(x, self.feed_forward(x), self.ffn_out))


class BertEncoder(nn.Module):
    """Embeddings, ``num_hidden_layers`` encoder layers (a final norm when pre-LN), pooling."""

    def __init__(self, config: BertConfig, pooling: Pooling | None = None) -> None:
        super().__init__()
        self.config = config
        self.pooling = pooling or Pooling()
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(
            EncoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        c = config.hidden_size
        self.relative_bias = (
            nn.Embedding.from_pretrained(
                torch.empty(config.relative_buckets, config.num_attention_heads)
            )
            if config.relative_buckets
            else None
        )
        self.final_norm = (
            nn.LayerNorm(c, eps=config.layer_norm_eps, bias=config.norm_bias)
            if config.pre_norm
            else None
        )

    def _context(
        self, batch: PackedBatch, backend: str, options: Mapping[str, Any]
    ) -> LayerContext:
        n, device = batch.padded_length, batch.input_ids.device
        rotary = {
            theta: rotary_tables(n, self.config.head_dim, theta, device)
            for theta in set(self.config.rotary_thetas)
        }
        bias = None
        if self.relative_bias is not None:
            buckets = relative_buckets(
                n, self.config.relative_buckets, self.config.relative_max_distance, device
            )
            bias = relative_bias(self.relative_bias.weight, buckets)
        return LayerContext(batch, backend, options, rotary, bias)

    def forward(
        self, batch: PackedBatch, backend: str = "flash", options: Mapping[str, Any] | None = None
    ) -> Tensor:
        """Token states ``[t, c]`` for a packed batch, global attention computed by ``backend``."""
        ctx = self._context(batch, backend, dict(options or {}))
        # A short forward runs on one thread where OpenMP helpers sleep between ops (serial.py).
        with serial.threads_for(int(batch.input_ids.shape[0]), batch.input_ids.device):
            x = self.embeddings(batch.input_ids, batch.positions, batch.token_types)  # [t, c]
            for layer in self.layers:
                x = layer(x, ctx)
            return x if self.final_norm is None else self.final_norm(x)

    def pooled(
        self,
        batch: PackedBatch,
        backend: str = "flash",
        options: Mapping[str, Any] | None = None,
        skip: int = 0,
    ) -> Tensor:
        """One vector per text, ``[b, c * modes]``, pooled as the model's ``pooling`` says
        (:mod:`models.text.network.pooling`); ``skip`` leading tokens per text stay out of it."""
        # The pooling ops join the forward's one-thread switch: alone they would each wait for
        # a sleeping OpenMP helper again (serial.py).
        with serial.threads_for(int(batch.input_ids.shape[0]), batch.input_ids.device):
            x = self(batch, backend, options)
            # Pooled in float32 whatever the weights' precision: a mean over hundreds of tokens
            # summed in bfloat16 (7 mantissa bits) would add rounding the layers did not make.
            return pool(x.float(), batch.rows, batch.positions, batch.lengths, self.pooling, skip)
