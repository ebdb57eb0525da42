"""A compact BERT encoder whose self-attention is any backend from ``models.attention``.

Post-LayerNorm BERT (Devlin et al., "BERT", NAACL 2019; Vaswani et al. 2017, section 3.1) with the
query/key/value projections fused into one matmul. The attention core has no weights, so one
loaded copy of the projections serves every backend; the backend is picked per forward call.

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
from torch import Tensor, nn

from models.attention import attend
from models.text import fused_linear
from models.text.config import BertConfig


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
    """

    input_ids: Tensor
    positions: Tensor
    rows: Tensor
    lengths: Tensor
    padded_length: int
    key_padding_mask: Tensor | None

    @classmethod
    def from_lists(
        cls, token_ids: list[list[int]], padded_length: int, device: torch.device
    ) -> PackedBatch:
        """Pack a list of token-id lists (each non-empty, none longer than ``padded_length``)."""
        lengths_list = [len(ids) for ids in token_ids]
        flat = [tok for ids in token_ids for tok in ids]
        lengths = torch.tensor(lengths_list, dtype=torch.long)
        rows = torch.repeat_interleave(torch.arange(len(token_ids)), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        positions = torch.arange(len(flat)) - starts[rows]
        mask = None
        if min(lengths_list) < padded_length:
            mask = torch.arange(padded_length)[None, :] < lengths[:, None]  # [b, n]
            mask = mask.to(device)
        return cls(
            input_ids=torch.tensor(flat, dtype=torch.long, device=device),
            positions=positions.to(device),
            rows=rows.to(device),
            lengths=lengths.to(device),
            padded_length=padded_length,
            key_padding_mask=mask,
        )

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    def pad(self, x: Tensor) -> Tensor:
        """``[t, k] -> [b, n, k]`` with zeros at padded positions (a view when nothing is padded)."""
        b, n, k = self.batch_size, self.padded_length, x.shape[-1]
        if self.key_padding_mask is None:
            return x.view(b, n, k)
        out = x.new_zeros(b, n, k)
        out[self.rows, self.positions] = x
        return out

    def unpad(self, x: Tensor) -> Tensor:
        """``[b, n, ...] -> [t, ...]``: the real positions only (one copy, any input strides)."""
        if self.key_padding_mask is None:
            return x.reshape(-1, *x.shape[2:])
        return x[self.rows, self.positions]

    def mean(self, x: Tensor) -> Tensor:
        """Per-text mean of packed rows: ``[t, c] -> [b, c]``."""
        if self.key_padding_mask is None:
            return x.view(self.batch_size, self.padded_length, -1).mean(dim=1)
        sums = x.new_zeros(self.batch_size, x.shape[-1]).index_add_(0, self.rows, x)
        return sums / self.lengths[:, None].to(x.dtype)


class Embeddings(nn.Module):
    """Word + absolute position + token-type embeddings, then LayerNorm (BERT section 3.2)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config.hidden_size
        # Uninitialised tables (the checkpoint fills them): nn.Embedding's own random init calls
        # normal_, which on the meta device imports torch._dynamo and costs ~1 s of start-up.
        self.word = nn.Embedding.from_pretrained(torch.empty(config.vocab_size, c))
        self.position = nn.Embedding.from_pretrained(torch.empty(config.max_position_embeddings, c))
        self.token_type = nn.Embedding.from_pretrained(torch.empty(config.type_vocab_size, c))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: Tensor, positions: Tensor) -> Tensor:
        """``[t] ids, [t] positions -> [t, c]``; every token is segment 0 (single sentences)."""
        x = self.word(input_ids) + self.position(positions) + self.token_type.weight[0]
        return self.norm(x)


class EncoderLayer(nn.Module):
    """One post-LN transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config.hidden_size
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.qkv = nn.Linear(c, 3 * c)  # rows: [query; key; value], fused into one matmul
        self.attn_out = nn.Linear(c, c)
        self.attn_norm = nn.LayerNorm(c, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(c, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, c)
        self.ffn_norm = nn.LayerNorm(c, eps=config.layer_norm_eps)

    def forward(
        self, x: Tensor, batch: PackedBatch, backend: str, options: Mapping[str, Any]
    ) -> Tensor:
        """``[t, c] -> [t, c]``; may overwrite ``x`` (see ``fused_linear.residual_linear``)."""
        b, n, h, d = batch.batch_size, batch.padded_length, self.heads, self.head_dim
        qkv = batch.pad(fused_linear.linear(x, self.qkv))  # [t, c] -> [b, n, 3c]
        q, k, v = qkv.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x [b, h, n, d]
        a = attend(q, k, v, backend=backend, key_padding_mask=batch.key_padding_mask, **options)
        a = batch.unpad(a.transpose(1, 2)).reshape(-1, h * d)  # [b, h, n, d] -> [t, c]
        x = self.attn_norm(fused_linear.residual_linear(x, a, self.attn_out))
        # Exact (erf) GELU, as BERT's "gelu"; the tanh approximation would drift from the reference.
        hidden = fused_linear.linear_gelu(x, self.ffn_in)  # [t, f]
        return self.ffn_norm(fused_linear.residual_linear(x, hidden, self.ffn_out))


class BertEncoder(nn.Module):
    """Embeddings, ``num_hidden_layers`` encoder layers, masked mean pooling."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(
        self, batch: PackedBatch, backend: str = "flash", options: Mapping[str, Any] | None = None
    ) -> Tensor:
        """Token states ``[t, c]`` for a packed batch, self-attention computed by ``backend``."""
        options = dict(options or {})
        x = self.embeddings(batch.input_ids, batch.positions)  # [t, c]
        for layer in self.layers:
            x = layer(x, batch, backend, options)
        return x

    def pooled(
        self, batch: PackedBatch, backend: str = "flash", options: Mapping[str, Any] | None = None
    ) -> Tensor:
        """Mean of each text's token states over its real tokens: ``[b, c]``.

        sentence-transformers' ``Pooling(pooling_mode_mean_tokens=True)`` (Reimers & Gurevych,
        "Sentence-BERT", EMNLP 2019, section 3); padded positions never enter the sum.
        """
        return batch.mean(self(batch, backend, options))  # [t, c] -> [b, c]
