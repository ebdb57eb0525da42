"""TimesFM 2.5 (Das et al., ICML 2024, "A decoder-only foundation model for time-series
forecasting"; version 2.5's 200M checkpoint) from a folder transformers wrote
(``TimesFm2_5ModelForPrediction.save_pretrained``), with our attention backends per request.

The class runs as transformers wrote it: patches of 32 steps as tokens through causal
self-attention layers (every call through :mod:`models.hf_forecast.bridge`), a point head and a
quantile head read off the last token. What we add around its ``forward``:

* **Series of different lengths in one batch.** The batcher joins series of similar lengths;
  each forward pass runs those of one length in patches (``group_key``), each padded at the
  front to that whole number of patches with the class's own padding mask
  (``forecast_context_len``). The model normalises each series by its own statistics and masks
  padding from attention and positions, so the answer equals the series' forward alone (at the
  model's full context) to float rounding; the tests hold it to 1e-4.
* **Per series, never per batch**: transformers' ``truncate_negative`` clamps when the minimum
  over the whole batch is non-negative; here each series' own minimum decides.
* **Missing values** (NaN), as the ``timesfm`` package's ``forecast`` treats them: leading NaNs
  are dropped, the others filled by linear interpolation (the last observed value carries on).
* **Options** (``model_options``): ``window_size`` (trend + residual decomposition by a moving
  average), ``force_flip_invariance`` and ``truncate_negative``, defaulting to the config's.

Channels are independent: a series of ``c`` channels is ``c`` rows of the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.attention import AttentionCall
from models.attention.pricing import MATMUL
from models.errors import ModelInputError
from models.hf_forecast.bridge import load_bridged, runs_causal
from models.hf_forecast.families import LayerShape
from models.hf_forecast.folder import Sidecar
from models.zero_shot.forecaster import ZeroShotForecaster
from models.zero_shot.series import ZeroShotWindow

OPTIONS = ("window_size", "force_flip_invariance", "truncate_negative")


def fill_missing(values: np.ndarray) -> np.ndarray:
    """One channel with leading NaNs dropped and the rest linearly interpolated (the ``timesfm``
    package's rule; ``np.interp`` holds the end values past the last observation)."""
    missing = np.isnan(values)
    if not missing.any():
        return values
    observed = np.flatnonzero(~missing)
    values = values[observed[0] :]
    missing = missing[observed[0] :]
    if missing.any():
        values = values.copy()
        at = np.arange(len(values))
        values[missing] = np.interp(at[missing], at[~missing], values[~missing])
    return values


class TimesFM25Forecaster(ZeroShotForecaster):
    """A loaded ``TimesFm2_5ModelForPrediction``."""

    kind = "timesfm2_5"
    architecture = "TimesFM 2.5 (Das et al., ICML 2024), transformers' TimesFm2_5ModelForPrediction"
    missing_values = (
        "null marks a missing value: leading ones are dropped, the others filled by linear "
        "interpolation (the timesfm package's rule)"
    )
    # bfloat16 weights with float32 series in and statistics kept float32 (see forecast()).
    # int8 is left out: the class casts each block's input to its first weight's dtype, which
    # dynamic quantization's packed weights do not have.
    precisions = ("float32", "bfloat16")

    def __init__(self, name: str, model: Any, directory: Path, sidecar: Sidecar) -> None:
        super().__init__(name, model, directory, sidecar)
        c = model.config
        self.patch = int(c.patch_length)
        self.context = int(c.context_length)
        self.horizon = int(c.horizon_length)
        self.levels = tuple(float(q) for q in c.quantiles)
        self.defaults = {
            "window_size": None,
            "force_flip_invariance": bool(c.force_flip_invariance),
            "truncate_negative": bool(c.infer_is_positive),
        }
        self.heads = int(c.num_attention_heads)
        self.kv_heads = int(c.num_key_value_heads)
        self.head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // self.heads)
        self._causal = runs_causal(model.model.layers[0].self_attn, 2)

    @classmethod
    def load(cls, folder: Path, sidecar: Sidecar, device: str = "cpu") -> TimesFM25Forecaster:
        """Load a ``save_pretrained`` folder; :class:`FolderError` says what is wrong."""
        import transformers

        model = load_bridged(transformers.TimesFm2_5ModelForPrediction, folder, device)
        return cls(folder.name, model, folder, sidecar)

    # ------------------------------------------------------------------ options

    def read_options(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The request's ``model_options`` over the config's defaults."""
        given = dict(given or {})
        unknown = sorted(set(given) - set(OPTIONS))
        if unknown:
            raise ModelInputError(
                f"{self.name} takes model_options {', '.join(OPTIONS)}; unknown: "
                f"{', '.join(unknown)}"
            )
        window = given.get("window_size")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ModelInputError("model_options.window_size must be a positive integer or null")
        for flag in ("force_flip_invariance", "truncate_negative"):
            if flag in given and not isinstance(given[flag], bool):
                raise ModelInputError(f"model_options.{flag} must be true or false")
        return {**self.defaults, **given}

    # ------------------------------------------------------------------ cost

    def _rows_per_window(self) -> int:
        # Flip invariance runs every row twice (the series and its negation).
        return 2 if self.defaults["force_flip_invariance"] else 1

    def layer_shapes(self, tokens: int) -> list[LayerShape]:
        return [
            LayerShape(f"model.layers.{i}.self_attn", tokens, tokens, self._causal)
            for i in range(len(self.model.model.layers))
        ]

    def attention_call(
        self, layer: LayerShape, rows: int, itemsize: int, device: str
    ) -> AttentionCall:
        return AttentionCall(
            rows * self._rows_per_window(),
            self.heads,
            layer.lq,
            layer.lk,
            self.head_dim,
            itemsize,
            layer.causal,
            padded=True,
            device_type=device,
        )

    def dense_work(self, rows: int, tokens: int) -> float:
        c = self.model.config
        d, f, hd = c.hidden_size, c.intermediate_size, self.head_dim
        projections = d * hd * (2 * self.heads + 2 * self.kv_heads) + d * f * 2
        quantiles = len(self.levels) + 1
        # The input block (2 x patch -> d) and both output heads run on every token.
        heads = d * d * 2 + d * quantiles * (c.horizon_length + c.output_quantile_len)
        heads += 2 * self.patch * d + d * d
        per_token = projections * c.num_hidden_layers + heads
        return MATMUL * rows * self._rows_per_window() * tokens * per_token

    def dense_bytes(self, rows: int, tokens: int, itemsize: int) -> int:
        c = self.model.config
        d, f = c.hidden_size, c.intermediate_size
        quantiles = len(self.levels) + 1
        width = 6 * d + 2 * f + quantiles * (c.horizon_length + c.output_quantile_len)
        return rows * self._rows_per_window() * tokens * width * itemsize

    # ------------------------------------------------------------------ inference

    def forecast(
        self, windows: list[ZeroShotWindow], horizon: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        # predict() groups windows by length and options (group_key): one padded length, fixed
        # by the group, so a series' answer never depends on its neighbours.
        options = windows[0].model_options
        length = min(self.context, windows[0].tokens * self.patch)
        rows, owners = [], []
        for i, w in enumerate(windows):
            for channel in range(w.target.shape[1]):
                rows.append(fill_missing(w.target[:, channel].astype(np.float64)))
                owners.append(i)
        # float32 in, whatever the weights: the class normalises each series in its input's
        # dtype and casts to the weights' inside its first block.
        past = [torch.from_numpy(r.astype(np.float32)).to(self.device) for r in rows]
        out = self.model(
            past_values=past,
            window_size=options["window_size"],
            forecast_context_len=length,
            truncate_negative=False,  # per series below, not over the batch
            force_flip_invariance=options["force_flip_invariance"],
        )
        full = out.full_predictions.double().cpu().numpy()  # [rows, H, 1 + levels]
        point = out.mean_predictions.double().cpu().numpy()  # [rows, H]
        answers = []
        owner = np.asarray(owners)
        for i, w in enumerate(windows):
            mine = np.flatnonzero(owner == i)
            p = point[mine].T[:horizon]  # [H, c]
            q = full[mine][:, :horizon, 1:].transpose(2, 1, 0)  # [levels, H, c]
            if options["truncate_negative"] and np.nanmin(w.target) >= 0:
                p, q = np.maximum(p, 0.0), np.maximum(q, 0.0)
            answers.append((p, q))
        return answers
