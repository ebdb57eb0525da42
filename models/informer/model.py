"""The Informer network (Zhou et al., AAAI 2021) with the attention backend chosen per call.

Encoder: embedding -> [self-attention layer -> distilling layer] x (e_layers-1) -> self-attention
layer -> LayerNorm. Decoder (generative, paper Sec. 3.3): the last ``label_len`` known steps
followed by ``pred_len`` zero placeholders, masked self-attention, cross-attention to the encoder,
LayerNorm, a linear projection; the whole horizon comes out of one forward pass.

Options beyond the paper (see :class:`InformerConfig`): channel independence and patch tokens
(PatchTST, Nie et al., ICLR 2023) and a linear path, the closed-form NLinear map of
:mod:`models.training.linear`, to which the network's output is added as a correction.

Attention plan (which backend each layer runs), decided per call by :func:`attention_plan`:
    * every layer runs the requested backend with the requested options;
    * a layer the backend cannot run (e.g. causal decoder self-attention for ``nystrom``) runs
      exact attention instead, with the reason recorded;
    * with ``probsparse``, the decoder cross-attention is exact, as in the paper (Fig. 2; the
      reference builds it with ``FullAttention``): ProbSparse is a self-attention mechanism.
    * exact attention in place of the requested backend is ``flash`` (the fused kernel, same
      result as ``full`` without the score matrix) where that accepts the layer, else ``full``.

Dimension legend: ``b`` batch (``b·c`` rows when channels run independently), ``n`` steps,
``t`` tokens, ``c`` channels, ``f`` calendar features, ``d`` width, ``h`` horizon.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.attention import BACKENDS, InputSpec, get_backend
from models.informer.config import InformerConfig
from models.informer.embed import DataEmbedding
from models.informer.layers import DecoderLayer, DistilLayer, EncoderLayer
from models.informer.patching import PatchEmbedding, fold_channels, pad_to_patches, unfold_channels
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
    head_dim, dec_len = cfg.head_dim, cfg.dec_tokens

    def pick(lq: int, lk: int, causal: bool) -> LayerChoice:
        spec = InputSpec(lq, lk, head_dim, dtype, device_type, causal=causal)
        reasons = chosen.unsupported_reasons(spec, resolved)
        if reasons:
            return exact_choice(spec, "; ".join(reasons))
        return LayerChoice(backend, resolved)

    plan = {f"encoder.{i}.self": pick(n, n, False) for i, n in enumerate(enc_lengths)}
    for i in range(cfg.d_layers):
        plan[f"decoder.{i}.self"] = pick(dec_len, dec_len, True)
        if backend == "probsparse":
            spec = InputSpec(dec_len, enc_lengths[-1], head_dim, dtype, device_type)
            plan[f"decoder.{i}.cross"] = exact_choice(
                spec, "Informer's cross-attention is exact (paper Fig. 2)"
            )
        else:
            plan[f"decoder.{i}.cross"] = pick(dec_len, enc_lengths[-1], False)
    return plan


def backend_cards(
    plan_of: Callable[[str], Mapping[str, LayerChoice]], measured: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Every backend as a forecaster's card shows it: exact or not, its options, what each
    attention layer runs (``plan_of(backend)``), why a layer fell back, and its measured
    quality (``measured``: ``quality.json``'s ``backends``)."""
    cards = {}
    for name in BACKENDS:
        b = get_backend(name)
        plan = plan_of(name)
        cards[name] = {
            "exact": b.exact,
            "options": {k: o.describe() for k, o in b.options.items()},
            "layers": {k: v.backend for k, v in plan.items()},
            "fallbacks": {k: v.reason for k, v in plan.items() if v.reason},
            "quality": measured.get(name),
        }
    return cards


def exact_choice(spec: InputSpec, reason: str) -> LayerChoice:
    """Exact attention for a layer the requested backend does not run: ``flash`` where its fused
    kernel takes ``spec`` (the same result as ``full`` without the Lq x Lk score matrix), else
    ``full``."""
    fused = not get_backend("flash").unsupported_reasons(spec)
    return LayerChoice("flash" if fused else "full", {}, reason)


def _with_seq_len(config: InformerConfig, seq_len: int) -> InformerConfig:
    return replace(config, seq_len=seq_len, label_len=min(config.label_len, seq_len))


class LinearPath(nn.Module):
    """NLinear's map ``W·(x - x_last) + x_last`` per channel, ``W`` of shape ``[h, n]``.

    Frozen by default: it holds the closed-form fit (:meth:`LinearBaseline.fit
    <models.training.linear.LinearBaseline.fit>`), set by the trainer before the first step.
    It commutes with RevIN (a map of differences without bias is shift- and scale-equivariant),
    so it runs on the normalised window and still equals the baseline in original units.
    """

    def __init__(self, context: int, horizon: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(horizon, context), requires_grad=False)

    def forward(self, x: Tensor, horizon: int) -> Tensor:  # [b, n, c] -> [b, h, c]
        if (horizon, x.shape[1]) != tuple(self.weight.shape):
            raise ValueError(
                f"the linear path maps exactly {self.weight.shape[1]} steps to "
                f"{self.weight.shape[0]}; got {x.shape[1]} steps and horizon {horizon}"
            )
        last = x[:, -1:]
        # As [b·c, n] x [n, h]: one GEMM with h columns (the [h, n] x [n, c] form has only c, a
        # shape BLAS runs several times slower). The differences are made contiguous first: as
        # a transposed view, with the weight read transposed too, the product is a GEMM with
        # both operands transposed or a strided batched one, several times slower than this
        # copy plus a plain GEMM, and an order of magnitude at batch 32
        # (benchmarks/results/forecast-long-http-cpu.md).
        moved = F.linear((x - last).transpose(1, 2).contiguous(), self.weight)  # [b, c, h]
        return moved.transpose(1, 2) + last


class Informer(nn.Module):
    """Informer encoder-decoder forecaster; see the module docstring for the layout."""

    def __init__(self, config: InformerConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.revin = RevIN(c.enc_in) if c.revin else None
        self.linear = LinearPath(c.seq_len, c.pred_len) if c.linear_path else None
        ch, marks = c.series_channels, (c.time_features if c.calendar else 0)
        if c.patch_len:
            self.enc_embedding: nn.Module = PatchEmbedding(
                c.patch_len, c.stride, ch, marks, c.d_model, c.dropout, pad_end=True
            )
            self.dec_embedding: nn.Module = PatchEmbedding(
                c.patch_len, c.patch_len, ch, marks, c.d_model, c.dropout, pad_end=False
            )
        else:
            self.enc_embedding = DataEmbedding(ch, marks, c.d_model, c.dropout)
            self.dec_embedding = DataEmbedding(ch, marks, c.d_model, c.dropout)
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
        out_channels = 1 if c.channel_independent else c.c_out
        self.projection = nn.Linear(c.d_model, max(c.patch_len, 1) * out_channels)
        if self.linear is not None:  # start as the linear baseline exactly (ReZero-style)
            nn.init.zeros_(self.projection.weight)
            nn.init.zeros_(self.projection.bias)

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the network's activations take (its decoder norm's; int8 keeps float32)."""
        return self.decoder_norm.weight.dtype

    def to_precision(self, precision: str, keep_float: tuple[str, ...] = ()) -> Informer:
        """A copy in ``precision`` (:mod:`models.precision`; float32: this model), RevIN and the
        linear path kept float32 (see :meth:`forward`)."""
        from models.precision import convert_network

        copy = convert_network(self, precision, keep_float=keep_float)
        if copy is not self:
            for keep in (copy.revin, copy.linear):
                if keep is not None:
                    keep.float()
        return copy  # type: ignore[return-value]

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
        dtype = self.compute_dtype
        plan = attention_plan(c, backend, options, x_enc.shape[1], dtype, x_enc.device.type)
        if self.revin is not None:
            mean, std = self.revin.stats(x_enc)
            x_enc = self.revin.normalize(x_enc, mean, std)
            start = self.revin.normalize(x_dec[:, : c.label_len], mean, std)
            x_dec = torch.cat([start, torch.zeros_like(x_dec[:, c.label_len :])], dim=1)
        base = self.linear(x_enc, pred_len) if self.linear is not None else None  # [b, h, c]
        channels = x_enc.shape[2]
        # RevIN and the linear path above stay in float32 whatever the network's precision
        # (Informer.to_precision): they carry most of the forecast's level, where bfloat16's 7
        # mantissa bits would show in the test MSE; the network adds a correction.
        x_enc, mark_enc, x_dec, mark_dec = (t.to(dtype) for t in (x_enc, mark_enc, x_dec, mark_dec))
        if c.channel_independent:  # [b, n, c] -> [b·c, n, 1]
            x_enc, x_dec = fold_channels(x_enc), fold_channels(x_dec)
            mark_enc = mark_enc.repeat_interleave(channels, dim=0)
            mark_dec = mark_dec.repeat_interleave(channels, dim=0)
        if c.patch_len:
            x_dec, mark_dec = pad_to_patches(x_dec, mark_dec, c.patch_len)

        h = self.enc_embedding(x_enc, mark_enc)  # [b, t, d]
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
        out = self.projection(self.decoder_norm(y))  # [b, t, patch_len·c_out]
        out = out.reshape(out.shape[0], -1, out.shape[2] // max(c.patch_len, 1))  # [b, steps, c]
        out = out[:, c.label_len : c.label_len + pred_len].float()  # [b, h, c_out]
        if c.channel_independent:
            out = unfold_channels(out, channels)
        if base is not None:
            out = out + base
        if self.revin is not None:
            out = self.revin.denormalize(out, mean, std)
        return out
