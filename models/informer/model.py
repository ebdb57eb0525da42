"""The Informer network (Zhou et al., AAAI 2021) with the attention backend chosen per call.

Encoder: embedding -> [self-attention layer -> distilling layer] x (e_layers-1) -> self-attention
layer -> LayerNorm. Decoder (generative, paper Sec. 3.3): the last ``label_len`` known steps
followed by ``pred_len`` zero placeholders, masked self-attention, cross-attention to the encoder,
LayerNorm, a linear projection; the whole horizon comes out of one forward pass.

Attention plan (which backend each layer runs), decided per call by :func:`attention_plan`:
    * every layer runs the requested backend with the requested options;
    * a layer the backend cannot run (e.g. causal decoder self-attention for ``nystrom``) runs
      exact ``full`` attention instead, with the reason recorded;
    * with ``probsparse``, the decoder cross-attention is exact, as in the paper (Fig. 2; the
      reference builds it with ``FullAttention``): ProbSparse is a self-attention mechanism.

Dimension legend: ``b`` batch, ``n`` steps, ``c`` channels, ``f`` calendar features, ``d`` width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from models.attention import InputSpec, get_backend
from models.informer.config import InformerConfig
from models.informer.embed import DataEmbedding
from models.informer.layers import DecoderLayer, DistilLayer, EncoderLayer
from models.informer.revin import RevIN


@dataclass(frozen=True)
class LayerChoice:
    """What one attention layer runs: backend, its resolved options, and why if it fell back."""

    backend: str
    options: dict[str, Any]
    reason: str | None = None


def attention_plan(
    config: InformerConfig,
    backend: str,
    options: dict[str, Any] | None = None,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device_type: str = "cpu",
) -> dict[str, LayerChoice]:
    """Backend per attention layer for one forward pass (raises ``AttentionError`` on a bad
    backend name or option). Layer names: ``encoder.{i}.self``, ``decoder.{i}.self``,
    ``decoder.{i}.cross``."""
    chosen = get_backend(backend)
    opts = dict(options or {})
    if backend == "probsparse" and "factor" not in opts:
        opts["factor"] = config.factor
    # Options left None mean "derived from the input" and are re-derived inside attend().
    resolved = {k: v for k, v in chosen.resolve_options(opts).items() if v is not None}
    cfg = config if seq_len is None else _with_seq_len(config, seq_len)
    enc_lengths = cfg.encoder_lengths()
    head_dim, dec_len = cfg.head_dim, cfg.dec_len

    def pick(lq: int, lk: int, causal: bool) -> LayerChoice:
        spec = InputSpec(lq, lk, head_dim, dtype, device_type, causal=causal)
        reasons = chosen.unsupported_reasons(spec, resolved)
        if reasons:
            return LayerChoice("full", {}, "; ".join(reasons))
        return LayerChoice(backend, resolved)

    plan = {f"encoder.{i}.self": pick(n, n, False) for i, n in enumerate(enc_lengths)}
    for i in range(cfg.d_layers):
        plan[f"decoder.{i}.self"] = pick(dec_len, dec_len, True)
        if backend == "probsparse":
            plan[f"decoder.{i}.cross"] = LayerChoice(
                "full", {}, "Informer's cross-attention is exact (paper Fig. 2)"
            )
        else:
            plan[f"decoder.{i}.cross"] = pick(dec_len, enc_lengths[-1], False)
    return plan


def _with_seq_len(config: InformerConfig, seq_len: int) -> InformerConfig:
    return replace(config, seq_len=seq_len, label_len=min(config.label_len, seq_len))


class Informer(nn.Module):
    """Informer encoder-decoder forecaster; see the module docstring for the layout."""

    def __init__(self, config: InformerConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.revin = RevIN(c.enc_in) if c.revin else None
        self.enc_embedding = DataEmbedding(c.enc_in, c.time_features, c.d_model, c.dropout)
        self.dec_embedding = DataEmbedding(c.dec_in, c.time_features, c.d_model, c.dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation)
            for _ in range(c.e_layers)
        )
        self.distil = nn.ModuleList(
            DistilLayer(c.d_model) for _ in range(c.e_layers - 1 if c.distil else 0)
        )
        self.encoder_norm = nn.LayerNorm(c.d_model)
        self.decoder = nn.ModuleList(
            DecoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.mix)
            for _ in range(c.d_layers)
        )
        self.decoder_norm = nn.LayerNorm(c.d_model)
        self.projection = nn.Linear(c.d_model, c.c_out)

    def forward(
        self,
        x_enc: Tensor,  # [b, seq_len, c] scaled history
        mark_enc: Tensor,  # [b, seq_len, f]
        x_dec: Tensor,  # [b, label_len + pred_len, c]: start token, then zeros
        mark_dec: Tensor,  # [b, label_len + pred_len, f]
        backend: str = "full",
        options: dict[str, Any] | None = None,
    ) -> Tensor:  # [b, pred_len, c_out]
        c = self.config
        pred_len = x_dec.shape[1] - c.label_len
        plan = attention_plan(c, backend, options, x_enc.shape[1], x_enc.dtype, x_enc.device.type)
        if self.revin is not None:
            mean, std = self.revin.stats(x_enc)
            x_enc = self.revin.normalize(x_enc, mean, std)
            start = self.revin.normalize(x_dec[:, : c.label_len], mean, std)
            x_dec = torch.cat([start, torch.zeros_like(x_dec[:, c.label_len :])], dim=1)

        h = self.enc_embedding(x_enc, mark_enc)  # [b, n, d]
        for i, layer in enumerate(self.encoder):
            choice = plan[f"encoder.{i}.self"]
            h = layer(h, choice.backend, choice.options)
            if i < len(self.distil):
                h = self.distil[i](h)  # [b, ceil(n/2), d]
        memory = self.encoder_norm(h)

        y = self.dec_embedding(x_dec, mark_dec)  # [b, label_len + pred_len, d]
        for i, layer in enumerate(self.decoder):
            s, x = plan[f"decoder.{i}.self"], plan[f"decoder.{i}.cross"]
            y = layer(y, memory, (s.backend, s.options), (x.backend, x.options))
        out = self.projection(self.decoder_norm(y))[:, -pred_len:]  # [b, pred_len, c_out]
        if self.revin is not None:
            out = self.revin.denormalize(out, mean, std)
        return out
