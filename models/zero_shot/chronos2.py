"""Chronos-2 (Ansari et al., 2025, "Chronos-2: From Univariate to Universal Forecasting",
arXiv:2510.15821) from a folder the ``chronos-forecasting`` package reads
(``Chronos2Pipeline.from_pretrained``), with our attention backends per request.

The model runs as the package wrote it: a series' history in patches (plus a [REG] token and one
token per output patch) through encoder blocks of time self-attention, group self-attention and
a feed-forward layer, and a quantile head on the output-patch tokens. What we add:

* **Time self-attention runs the request's backend.** Each ``TimeSelfAttention``'s ``MHA`` hands
  its ``q, k, v`` and padding mask to :func:`models.hf_forecast.bridge.attend_hf`, which reads
  the backend of the forward pass in progress (:func:`~models.hf_forecast.bridge.backend_scope`),
  falls back to exact attention where the backend cannot take the layer
  (:func:`~models.hf_forecast.bridge.layer_choice`) and records what each layer ran.
  Chronos-2 scores ``q·k`` without the ``1/sqrt(d)`` our kernels apply, so the bridge multiplies
  the query by ``sqrt(d)``.
* **Group self-attention stays exact** (the package's own SDPA call): it attends across the rows
  of one item (target channels and covariates) at each time step, over a handful of rows, with
  a mask that is neither causal nor a key padding. Chronos-2 has no cross attention.
* **Inputs by the package's preprocessing** (:mod:`models.zero_shot.chronos2_inputs`), each
  window its own group, series of different lengths left-padded with NaN and masked, so a
  series' answer does not depend on its batch neighbours (equal to float rounding).
* **Missing values**: Chronos-2 takes NaN natively (a masked step; a patch with no observed
  step is a masked token), so windows go in as given.

The answer equals ``Chronos2Pipeline.predict_quantiles(inputs, prediction_length=horizon,
quantile_levels=<the model's levels>)`` for horizons up to one forward pass
(``max_output_patches x patch``); the pipeline's autoregressive long-horizon heuristic is not
offered (longer horizons are refused).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from models.attention import AttentionCall
from models.attention.pricing import MATMUL
from models.hf_forecast.bridge import attend_hf
from models.hf_forecast.families import LayerShape
from models.hf_forecast.folder import FolderError, Sidecar, read_config
from models.zero_shot.chronos2_inputs import batch_inputs, check_covariates
from models.zero_shot.forecaster import ZeroShotForecaster
from models.zero_shot.quantiles import at_levels
from models.zero_shot.series import ZeroShotWindow


def _time_attention(
    module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, mask: Tensor
) -> tuple[Tensor, None]:
    """``MHA._sdpa_attention``'s signature (``[b, h, L, d]`` in and out; ``mask`` additive
    ``[b, 1, 1, L]``) through the bridge: ``scaling=1.0`` is Chronos-2's unscaled ``q·k``."""
    out, _ = attend_hf(module, query, key, value, mask, scaling=1.0)
    return out.transpose(1, 2), None  # the bridge answers [b, L, h, d]


def route_time_attention(model: torch.nn.Module) -> list[str]:
    """Send every time self-attention of ``model`` through :func:`_time_attention`; returns the
    layers' names (as the scope records them), in order."""
    from chronos.chronos2.layers import TimeSelfAttention

    names = []
    for path, module in model.named_modules():
        if isinstance(module, TimeSelfAttention):
            mha = module.self_attention
            mha._attnserve_name = f"{path}.self_attention"
            call = functools.partial(_time_attention, mha)
            # MHA.forward calls one of these by config._attn_implementation (eager when
            # attention weights are asked for): both go through the bridge.
            mha._sdpa_attention = call
            mha._eager_attention = call
            names.append(mha._attnserve_name)
    return names


class Chronos2Forecaster(ZeroShotForecaster):
    """A loaded ``chronos.chronos2.Chronos2Model``."""

    kind = "chronos2"
    architecture = "Chronos-2 (Ansari et al., 2025), chronos-forecasting's Chronos2Model"
    missing_values = (
        "null marks a missing value: Chronos-2 masks it natively (no filling), in the target "
        "and in numeric covariates"
    )
    extra_inputs = ("past_covariates", "future_covariates")

    def __init__(self, name: str, model: Any, directory: Path, sidecar: Sidecar) -> None:
        super().__init__(name, model, directory, sidecar)
        c, cc = model.config, model.chronos_config
        self.patch = int(cc.input_patch_size)
        self.context = int(cc.context_length)
        self.horizon = int(cc.max_output_patches) * int(cc.output_patch_size)
        self.levels = tuple(float(q) for q in cc.quantiles)
        self.registers = 1 if cc.use_reg_token else 0  # the [REG] token after the history
        self.heads = int(c.num_heads)
        self.head_dim = int(c.d_kv)
        self.layer_names = route_time_attention(model)

    @classmethod
    def load(cls, folder: Path, sidecar: Sidecar, device: str = "cpu") -> Chronos2Forecaster:
        """Load a ``save_pretrained`` folder with the class its config names, as
        ``Chronos2Pipeline.from_pretrained`` does; :class:`FolderError` says what is wrong."""
        import chronos.chronos2

        config = read_config(folder) or {}
        architecture = (config.get("architectures") or ["Chronos2Model"])[0]
        model_class: Any = getattr(chronos.chronos2, architecture, None)
        if not (
            isinstance(model_class, type)
            and issubclass(model_class, chronos.chronos2.Chronos2Model)
        ):
            raise FolderError(f"config.json names {architecture!r}, not a Chronos-2 model class")
        try:
            loader: Any = model_class  # a Chronos2Model subclass (checked above)
            model = loader.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
        except (OSError, ValueError, RuntimeError, AssertionError) as exc:
            raise FolderError(
                f"chronos-forecasting could not load it ({type(exc).__name__}: {exc})"
            ) from None
        model = model.to(device=device, dtype=torch.float32).eval()
        return cls(folder.name, model, folder, sidecar)

    # ------------------------------------------------------------------ series

    def sequence(self, steps: int, horizon: int) -> int:
        """Tokens the time self-attention runs for ``steps`` history steps (at most the context)
        and ``horizon`` forecast steps: history patches, [REG], output patches."""
        return (
            math.ceil(min(steps, self.context) / self.patch)
            + self.registers
            + math.ceil(horizon / self.patch)
        )

    def tokens_of(self, steps: int) -> int:
        """The sequence at the model's horizon (a window prepared for a shorter one says so)."""
        return self.sequence(steps, self.horizon)

    def prepare(self, *args: Any, **kwargs: Any) -> ZeroShotWindow:
        """:meth:`ZeroShotForecaster.prepare`, the window's tokens counting the output patches
        of the horizon asked for (Chronos-2 runs one token per output patch)."""
        window = super().prepare(*args, **kwargs)
        window.tokens = self.sequence(len(window.target), self.check_horizon(kwargs.get("horizon")))
        return window

    def check_series(self, window: ZeroShotWindow, name: str) -> None:
        check_covariates(window, name)

    def group_key(self, window: ZeroShotWindow) -> tuple[Any, ...]:
        """The base's key and the horizon asked for: Chronos-2 runs one token per output
        patch, which every other token attends to, so the answer depends on it."""
        return (*super().group_key(window), window.horizon)

    # ------------------------------------------------------------------ cost

    def layer_shapes(self, tokens: int) -> list[LayerShape]:
        return [LayerShape(name, tokens, tokens, False) for name in self.layer_names]

    def attention_call(
        self, layer: LayerShape, rows: int, itemsize: int, device: str
    ) -> AttentionCall:
        # One row per window: a window's covariates and extra channels add rows the price
        # does not see (the batcher knows lengths, not widths).
        return AttentionCall(
            rows,
            self.heads,
            layer.lq,
            layer.lk,
            self.head_dim,
            itemsize,
            False,
            padded=True,
            device_type=device,
        )

    def _widths(self) -> tuple[int, int, int, int, int]:
        c = self.model.config
        return int(c.d_model), int(c.d_ff), self.heads * self.head_dim, len(self.levels), self.patch

    def dense_work(self, rows: int, tokens: int) -> float:
        d, f, inner, q, p = self._widths()
        layers = int(self.model.config.num_layers)
        # Per token and layer: time and group attention's four projections each, the MLP.
        per_token = layers * (8 * d * inner + 2 * d * f)
        per_token += 3 * p * (f + d) + f * d  # the input patch block (time, values, mask)
        per_token += d * f + (f + d) * q * p  # the quantile head (priced on every token)
        # Group attention: every time step scores the batch's rows against each other.
        group = layers * tokens * 2 * rows * rows * inner
        return MATMUL * (rows * tokens * per_token + group)

    def dense_bytes(self, rows: int, tokens: int, itemsize: int) -> int:
        d, f, inner, q, p = self._widths()
        # Per token: the residual stream and its norm, q/k/v/out, the MLP's hidden, the heads.
        width = 2 * d + 4 * inner + 2 * f + 3 * p + q * p
        group_scores = tokens * self.heads * rows * rows * 4  # softmax in float32
        return rows * tokens * width * itemsize + group_scores

    # ------------------------------------------------------------------ inference

    def forecast(
        self, windows: list[ZeroShotWindow], horizon: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        # The horizon each window was prepared for (group_key: one per forward pass), as the
        # pipeline's prediction_length; the server predicts at the model's and cuts afterwards.
        horizon = windows[0].horizon or horizon
        patches = math.ceil(horizon / self.patch)
        batch = batch_inputs(windows, patches * self.patch, self.device)
        out = self.model(
            context=batch.context,
            group_ids=batch.group_ids,
            future_covariates=batch.future,
            num_output_patches=patches,
        )
        preds = out.quantile_preds.double().cpu().numpy()  # [R, levels, F]
        answers = []
        for start, end in batch.targets:
            q = preds[start:end, :, :horizon].transpose(1, 2, 0)  # [levels, H, c]
            point = at_levels([0.5], self.levels, q)[0]  # the median, as the pipeline's mean
            answers.append((point, q))
        return answers

    # ------------------------------------------------------------------ description

    def card(self) -> dict[str, Any]:
        card = super().card()
        card["attention"] = (
            "time self-attention runs the requested backend (exact where it cannot take a "
            "layer); group self-attention across a series' channels and covariates stays exact; "
            "Chronos-2 has no cross attention"
        )
        card["covariates_rules"] = (
            "past covariates: one value per history step; a known future covariate must also be "
            "a past covariate, of the same kind (numbers or categories)"
        )
        return card
