"""What differs between the transformers time-series classes: inputs, outputs, attention layers
and cost. Two families cover the served classes:

* :class:`PatchTSTFamily` — ``PatchTSTForPrediction`` (Nie et al., ICLR 2023): one forward pass
  maps a history ``[context, channels]`` to the horizon. A point head (``loss="mse"``) gives the
  forecast; a distribution head gives the distribution's parameters, whose mean is the forecast
  and whose seeded samples (the class's ``generate``) give quantiles.
* :class:`Seq2SeqFamily` — ``TimeSeriesTransformerForPrediction`` (Vaswani et al. 2017 applied to
  forecasting) and ``InformerForPrediction`` (Zhou et al., AAAI 2021): an encoder–decoder with
  lagged inputs, calendar features and a distribution head, sampled one step at a time by the
  class's own ``generate``; the forecast is the mean of those samples.

Layer names (``encoder.0.self``, ``decoder.0.cross``) match the plans of our own Informer.

Each family says which precisions (:mod:`models.precision`) it runs in (``precisions``): PatchTST
with a point head runs in bfloat16 too (the class scales each window inside its forward, in the
input's dtype, and every layer is a plain linear, convolution or norm). Distribution heads and
the encoder-decoders sample with ``torch.distributions``, whose float32 code (log-gamma,
Student-t) is left as it is: those stay float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from models.attention import AttentionCall, attention_bytes, attention_work
from models.attention.pricing import MATMUL
from models.hf_forecast.bridge import runs_causal
from models.informer.model import LayerChoice
from models.names import DEFAULT_PRECISION

Plan = Mapping[str, LayerChoice]  # layer name -> what it runs


@dataclass(frozen=True)
class LayerShape:
    """One attention layer's call: query and key lengths, causality (as the bridge will read it
    at run time, :func:`~models.hf_forecast.bridge.runs_causal`: the plan prices what runs)."""

    name: str
    lq: int
    lk: int
    causal: bool = False


class PatchTSTFamily:
    """``PatchTSTForPrediction``: channel-independent patches as tokens, one forward pass."""

    kind = "patchtst"
    architecture = "PatchTST (Nie et al., ICLR 2023), transformers' PatchTSTForPrediction"

    def __init__(self, model: Any) -> None:
        c = model.config
        self.model = model
        self.history_rows = int(c.context_length)
        self.horizon = int(c.prediction_length)
        self.channels = int(c.num_input_channels)
        self.probabilistic = model.distribution_output is not None
        self.samples = int(c.num_parallel_samples) if self.probabilistic else 0
        # The precisions it runs in (see the module doc): a point head in bfloat16 as well.
        self.precisions: tuple[str, ...] = (
            (DEFAULT_PRECISION,) if self.probabilistic else (DEFAULT_PRECISION, "bfloat16")
        )
        self.time_feature_width = 0
        self.static_categorical = 0
        self.cardinality: list[int] = []
        self.static_real = 0
        patches = model.model.patchifier.num_patches + (1 if c.use_cls_token else 0)
        self.tokens = patches
        encoder = model.model.encoder.layers
        self.layers = [
            LayerShape(f"encoder.{i}.self", patches, patches, runs_causal(layer.self_attn, patches))
            for i, layer in enumerate(encoder)
        ]
        if c.channel_attention:  # the same attention module, across the channels of a patch
            n = self.channels
            self.layers += [
                LayerShape(f"encoder.{i}.channel", n, n, runs_causal(layer.self_attn, n))
                for i, layer in enumerate(encoder)
            ]

    def forecast(self, values: Tensor) -> tuple[Tensor, Any]:
        """The point forecast ``[b, H, c]`` (the distribution's mean for a distribution head)
        and what :meth:`sample` needs."""
        out = self.model(past_values=values)
        if not self.probabilistic:
            return out.prediction_outputs, None
        params, loc, scale = out.prediction_outputs, out.loc, out.scale
        mean = self.model.distribution_output.distribution(params, loc=loc, scale=scale).mean
        return mean, (params, loc, scale)

    def sample(self, state: Any, row: int, seed: int) -> Tensor:
        """``[S, H, c]`` samples for batch row ``row``, as the class's ``generate`` draws them
        for that row alone after ``torch.manual_seed(seed)``."""
        params, loc, scale = state
        one = tuple(p[row : row + 1] for p in params)
        distribution = self.model.distribution_output.distribution(
            one, loc=loc[row : row + 1], scale=scale[row : row + 1]
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            draws = [distribution.sample() for _ in range(self.samples)]
        return torch.stack(draws, dim=1)[0]

    def work(self, plan: Plan, rows: int) -> float:
        """Flop-equivalents of one forward pass over ``rows`` windows."""
        c = self.model.config
        r, n, d, f = rows * self.channels, self.tokens, c.d_model, c.ffn_dim
        dense = MATMUL * r * n * (4 * d * d + 2 * d * f) * c.num_hidden_layers
        head = MATMUL * r * n * d * self.horizon
        attention = sum(
            attention_work(plan[s.name].backend, self._call(s, rows), plan[s.name].options)
            for s in self.layers
        )
        return dense + head + attention

    def memory(self, plan: Plan, rows: int, itemsize: int, device: str) -> int:
        """Peak activation bytes of one forward pass over ``rows`` windows: the layer widths
        alive at once plus the largest attention kernel's own peak."""
        c = self.model.config
        r, n = rows * self.channels, self.tokens
        widths = r * n * (6 * c.d_model + 2 * c.ffn_dim) * itemsize
        kernel = max(
            attention_bytes(
                plan[s.name].backend, self._call(s, rows, itemsize, device), plan[s.name].options
            )
            for s in self.layers
        )
        inputs = rows * (self.history_rows + self.horizon) * self.channels * 16
        return widths + kernel + inputs

    def head_dim(self, layer: LayerShape) -> int:
        c = self.model.config
        return int(c.d_model // c.num_attention_heads)

    def _call(
        self, s: LayerShape, rows: int, itemsize: int = 4, device: str = "cpu"
    ) -> AttentionCall:
        c = self.model.config
        # Time attention runs per channel; channel attention runs per patch.
        r = rows * (self.channels if s.name.endswith(".self") else self.tokens)
        return AttentionCall(
            r,
            c.num_attention_heads,
            s.lq,
            s.lk,
            self.head_dim(s),
            itemsize,
            s.causal,
            device_type=device,
        )


class Seq2SeqFamily:
    """``TimeSeriesTransformerForPrediction`` and ``InformerForPrediction``: encoder–decoder,
    lags, calendar features, sampled autoregressively by ``generate``."""

    kind = "seq2seq"
    precisions: tuple[str, ...] = (DEFAULT_PRECISION,)  # sampled in float32 (see the module doc)

    def __init__(self, model: Any) -> None:
        c = model.config
        self.model = model
        self.architecture = {
            "informer": "Informer (Zhou et al., AAAI 2021), transformers' InformerForPrediction",
            "time_series_transformer": "Time Series Transformer (vanilla encoder-decoder), "
            "transformers' TimeSeriesTransformerForPrediction",
        }[c.model_type]
        self.context_length = int(c.context_length)
        self.history_rows = int(c.context_length + max(c.lags_sequence))
        self.horizon = int(c.prediction_length)
        self.channels = int(c.input_size)
        self.probabilistic = True
        self.samples = int(c.num_parallel_samples)
        self.time_feature_width = int(c.num_time_features + c.num_dynamic_real_features)
        self.static_categorical = int(c.num_static_categorical_features)
        self.cardinality = list(c.cardinality or [])
        self.static_real = int(c.num_static_real_features)
        heads_e, heads_d = c.encoder_attention_heads, c.decoder_attention_heads
        self.heads = {"encoder": heads_e, "decoder": heads_d}
        enc = self._encoder_lengths()
        t = self.horizon
        self.layers = [LayerShape(f"encoder.{i}.self", n, n) for i, n in enumerate(enc)]
        for i, layer in enumerate(model.model.decoder.layers):
            causal = runs_causal(layer.self_attn, t)  # not every class's decoder says True
            self.layers.append(LayerShape(f"decoder.{i}.self", t, t, causal))
            self.layers.append(LayerShape(f"decoder.{i}.cross", t, enc[-1]))

    def _encoder_lengths(self) -> list[int]:
        c = self.model.config
        lengths, n = [], self.context_length
        for i in range(c.encoder_layers):
            lengths.append(n)
            # Informer's distilling conv halves the sequence between encoder layers.
            if getattr(c, "distil", False) and i < c.encoder_layers - 1:
                n = (n - 1) // 2 + 1
        return lengths

    def generate(self, kwargs: dict[str, Tensor], seed: int) -> Tensor:
        """``[S, H, c]`` samples of one window (batch of one) after ``torch.manual_seed(seed)``,
        as the class's own ``generate`` draws them."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            sequences = self.model.generate(**kwargs).sequences  # [1, S, H] or [1, S, H, c]
        out = sequences[0]
        return out.unsqueeze(-1) if out.dim() == 2 else out

    def work(self, plan: Plan, rows: int) -> float:
        """Flop-equivalents of sampling ``rows`` windows (one ``generate`` each)."""
        c = self.model.config
        d, s, h = c.d_model, self.samples, self.horizon
        enc_tokens = sum(self._encoder_lengths())
        dense = MATMUL * enc_tokens * (4 * d * d + 2 * d * c.encoder_ffn_dim) * 1.0
        # generate re-runs the decoder over the whole prefix at each of the H steps.
        prefix = (h + 1) // 2 or 1
        dec_tokens = s * h * prefix
        dense += MATMUL * dec_tokens * (8 * d * d + 2 * d * c.decoder_ffn_dim) * c.decoder_layers
        attention = 0.0
        for layer in self.layers:
            choice = plan[layer.name]
            if layer.name.startswith("encoder"):
                call = self._call(layer, 1)
            else:  # S samples at the mean prefix length, H times
                lk = layer.lk if layer.name.endswith("cross") else prefix
                shape = LayerShape(layer.name, prefix, lk, layer.causal)
                call = self._call(shape, s * h)
            attention += attention_work(choice.backend, call, choice.options)
        return rows * (dense + attention)

    def memory(self, plan: Plan, rows: int, itemsize: int, device: str) -> int:
        """Peak activation bytes: rows are sampled one at a time, so one row's S samples."""
        c = self.model.config
        s, h, d = self.samples, self.horizon, c.d_model
        ffn = max(c.encoder_ffn_dim, c.decoder_ffn_dim)
        widths = s * (h + self.context_length) * (6 * d + 2 * ffn) * itemsize
        kernel = 0
        for layer in self.layers:
            choice = plan[layer.name]
            rows_in = s if layer.name.startswith("decoder") else 1
            call = self._call(layer, rows_in, itemsize, device)
            kernel = max(kernel, attention_bytes(choice.backend, call, choice.options))
        return widths + kernel

    def head_dim(self, layer: LayerShape) -> int:
        heads = self.heads["encoder" if layer.name.startswith("encoder") else "decoder"]
        return int(self.model.config.d_model // heads)

    def _call(
        self, s: LayerShape, rows: int, itemsize: int = 4, device: str = "cpu"
    ) -> AttentionCall:
        heads = self.heads["encoder" if s.name.startswith("encoder") else "decoder"]
        return AttentionCall(
            rows, heads, s.lq, s.lk, self.head_dim(s), itemsize, s.causal, device_type=device
        )
