"""A transformers time-series folder as a servable forecaster, with our attention backends
swapped in per forward pass (:mod:`.bridge`).

It speaks the protocol of :class:`models.informer.InformerForecaster` — ``prepare`` one
history into a window, ``predict`` a batch of windows with a backend, ``card``, cost estimates —
so the service serves both alike. Differences a user sees:

* histories are sent in the model's own units (these classes scale each window themselves);
* timestamps are optional (the classes have no calendar); when given they must be evenly spaced
  and the forecast continues them, at the ``freq`` of ``attnserve.json`` when it has one;
* encoder–decoder classes also take each series' ``time_features`` (the history's rows and the
  horizon's) and static features, when their config says they use them;
* probabilistic heads return the mean and, on request, quantiles of seeded samples.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.attention import get_backend
from models.attention.base import InputSpec
from models.errors import ModelInputError
from models.hf_forecast.bridge import backend_scope, layer_choice, load_bridged
from models.hf_forecast.card import describe
from models.hf_forecast.families import PatchTSTFamily, Seq2SeqFamily
from models.hf_forecast.folder import (
    PREDICTION_CLASSES,
    FolderError,
    Sidecar,
    read_config,
    read_sidecar,
)
from models.hf_forecast.inputs import SAMPLE_SEED, HFWindow, read_clock, read_features
from models.informer.history import check_horizon, first_non_finite, predict_call, read_history
from models.informer.model import LayerChoice
from models.informer.timefeatures import check_future_fits, format_timestamps
from models.precision import convert_network, needs_conversion, precision_of
from models.quality_file import read_quality

log = logging.getLogger("attnserve")

# Autoformer's "attention" is auto-correlation (Wu et al., NeurIPS 2021): period-based
# aggregation of time-delayed series found by FFT, not softmax(QKᵀ)V; no backend applies.
# Plans kept (per backend and options; see HFForecaster.plan): options come from clients, so
# the cache is bounded. The served set is small (a default per backend plus auto's variants);
# this leaves room for many clients' own options, each plan a few entries per layer.
PLAN_CACHE_SIZE = 128

UNSUPPORTED = {
    "autoformer": "AutoformerForPrediction replaces attention with auto-correlation (Wu et al., "
    "NeurIPS 2021: series aggregated at FFT-found delays, not softmax(QK^T)V), so none of "
    "attnserve's attention backends maps onto it; serve it with transformers directly",
}


@dataclass
class HFForecast:
    """A forecast in original units; ``samples`` ``[S, H, c]`` for probabilistic heads."""

    timestamps: list[str] | None
    values: list[list[float]]
    samples: np.ndarray | None = None


def _prediction_class(config: Mapping[str, Any], folder: Path) -> Any:
    model_type = str(config.get("model_type"))
    if model_type in UNSUPPORTED:
        raise FolderError(UNSUPPORTED[model_type])
    wanted = PREDICTION_CLASSES[model_type]
    architectures = config.get("architectures") or [wanted]
    if wanted not in architectures:
        raise FolderError(
            f"config.json says {', '.join(architectures)}; attnserve serves {wanted} for "
            f"model_type {model_type!r} (save the prediction model, not the base model)"
        )
    import transformers

    return getattr(transformers, wanted)


class HFForecaster:
    """A loaded transformers time-series model with its optional ``attnserve.json``."""

    # prepare() checks these against the model's config itself (a clear 422 either way).
    extra_inputs = ("time_features", "static_categorical", "static_real")

    def __init__(
        self,
        name: str,
        model: Any,
        sidecar: Sidecar,
        directory: Path,
        trained_prob: bool = False,
    ) -> None:
        self.name = name
        self.model = model
        self.trained_prob = trained_prob
        self.sidecar = sidecar
        self.directory = directory
        config = model.config
        self.model_type: str = config.model_type
        self.family: PatchTSTFamily | Seq2SeqFamily = (
            PatchTSTFamily(model) if self.model_type == "patchtst" else Seq2SeqFamily(model)
        )
        f = self.family
        self.context = f.history_rows
        self.horizon = f.horizon
        self.probabilistic = f.probabilistic
        self.channels: list[str] = list(sidecar.channels or [str(i) for i in range(f.channels)])
        if len(self.channels) != f.channels:
            raise FolderError(
                f"attnserve.json names {len(self.channels)} channels but the model has {f.channels}"
            )
        self.freq = sidecar.freq
        # Informer checkpoints trained with ProbSparse keep it as their default (at their own
        # sampling factor); every other class was trained with exact attention.
        self.prob_factor = getattr(config, "sampling_factor", None)
        self.default_attention = "probsparse" if trained_prob else "flash"
        self.device = next(model.parameters()).device
        self.dtype: torch.dtype = next(model.parameters()).dtype
        self.precision = precision_of(self.dtype)
        self.compiled_backends: frozenset[str] = frozenset()
        # Keyed by (backend, options): least recently used plans go first past the bound.
        self._plans = functools.lru_cache(maxsize=PLAN_CACHE_SIZE)(self._layer_plan)
        self.quality = read_quality(directory / "quality.json")

    @classmethod
    def load(cls, folder: str | Path, device: str = "cpu") -> HFForecaster:
        """Load a ``save_pretrained`` folder; :class:`FolderError` says what is wrong."""
        folder = Path(folder)
        config = read_config(folder)
        if config is None:
            raise FolderError("config.json is missing or not a JSON object")
        model_class = _prediction_class(config, folder)
        if not any(
            (folder / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")
        ) and not any(folder.glob("model-*.safetensors")):
            raise FolderError(
                "no weights (model.safetensors) beside config.json; save the model with "
                "save_pretrained"
            )
        sidecar = read_sidecar(folder)
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(folder, local_files_only=True)
        trained_prob = getattr(hf_config, "attention_type", None) == "prob"
        if trained_prob:
            # transformers' ProbSparse layer does not call the attention interface; the "full"
            # layer has the same projections (same weight names) and does, so every backend,
            # our ProbSparse included, runs through the bridge.
            hf_config.attention_type = "full"
        if (
            getattr(hf_config, "num_dynamic_real_features", 0)
            and hf_config.model_type == "patchtst"
        ):
            raise FolderError("PatchTST with dynamic real features is not served")
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a server's log is no terminal
        model = load_bridged(model_class, folder, device, config=hf_config)
        return cls(folder.name, model, sidecar, folder, trained_prob)

    # ------------------------------------------------------------------ input validation

    def prepare(
        self,
        timestamps: Sequence[str] | None = None,
        values: Sequence[Sequence[float]] | np.ndarray | None = None,
        *,
        start: str | None = None,
        columns: Mapping[str, Sequence[float]] | None = None,
        time_features: Sequence[Sequence[float]] | None = None,
        static_categorical: Sequence[int] | None = None,
        static_real: Sequence[float] | None = None,
        seed: int = SAMPLE_SEED,
    ) -> HFWindow:
        """Validate one history into a window of its last :attr:`context` rows.

        Raises:
            ModelInputError: the history (rows or columns) is malformed, too short or not
                finite; timestamps are uneven or ``start`` comes without a known step; the
                features the model needs are missing, or given to a model without them.
        """
        raw = read_history(values, columns, self.channels)
        n = len(raw)
        if n < self.context:
            raise ModelInputError(
                f"{self.name} needs at least {self.context} rows of history, got {n} "
                "(longer histories are trimmed)"
            )
        if timestamps is not None and start is not None:
            raise ModelInputError("give either 'timestamps' or 'start', not both")
        raw = raw[-self.context :]
        first_non_finite(raw, n - self.context, self.channels)
        last, step = read_clock(timestamps, start, n, self.freq, self.name)
        window = HFWindow(raw.astype(np.float32), last, step, seed=seed)
        read_features(
            window, self.family, n, self.name, time_features, static_categorical, static_real
        )
        return window

    # ------------------------------------------------------------------ attention

    def check_attention(self, backend: str, options: dict | None = None) -> dict:
        """Resolved options for ``backend``; ``AttentionError`` if the name or an option is
        invalid. ProbSparse defaults to an Informer checkpoint's own sampling factor."""
        opts = dict(options or {})
        if backend == "probsparse" and "factor" not in opts and self.prob_factor:
            opts["factor"] = int(self.prob_factor)
        return get_backend(backend).resolve_options(opts)

    def plan(self, backend: str, options: dict | None = None) -> dict[str, LayerChoice]:
        """What each attention layer runs when ``backend`` is asked for (as the bridge decides
        at run time: an unsupported layer falls back to exact attention). Cached per backend
        and options, the :data:`PLAN_CACHE_SIZE` most recently used: the batcher prices every
        batch with it."""
        return self._plans(backend, tuple(sorted((options or {}).items())))

    def plan_cache_info(self) -> Any:
        """Hits, misses and size of the plan cache (``functools.lru_cache``'s ``cache_info``)."""
        return self._plans.cache_info()

    def _layer_plan(
        self, backend: str, items: tuple[tuple[str, Any], ...]
    ) -> dict[str, LayerChoice]:
        # Options as predict() hands them to the bridge (None: derived inside attend()).
        resolved = {
            k: v for k, v in self.check_attention(backend, dict(items)).items() if v is not None
        }
        out = {}
        for layer in self.family.layers:
            shape = (layer.lq, layer.lk, self.family.head_dim(layer))
            spec = InputSpec(*shape, self.dtype, self.device.type, causal=layer.causal)
            out[layer.name] = layer_choice(backend, resolved, spec)  # the bridge's own rule
        return out

    def memory_estimate(self, backend: str, options: dict | None = None, rows: int = 1) -> int:
        """Estimated peak activation bytes of :meth:`predict` on ``rows`` windows."""
        itemsize = self.dtype.itemsize
        return self.family.memory(self.plan(backend, options), rows, itemsize, self.device.type)

    def work_estimate(self, backend: str, options: dict | None = None, rows: int = 1) -> float:
        """Flop-equivalents of :meth:`predict` on ``rows`` windows (see :mod:`models.attention.pricing`)."""
        return self.family.work(self.plan(backend, options), rows)

    def warmup_batch_sizes(self, backend: str) -> list[int]:
        return [2]

    def compile(self, backends: list[str], *args: Any, **kwargs: Any) -> None:
        """transformers' classes are served eagerly (``torch.compile`` is not wired for them)."""
        if backends:
            log.info("%s: transformers folders are served eagerly (no torch.compile)", self.name)

    def check_horizon(self, horizon: int | None) -> int:
        """The horizon to return (the model's when None); ``ModelInputError`` when out of range."""
        return check_horizon(horizon, self.horizon, self.name)

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def predict(
        self,
        windows: list[HFWindow],
        backend: str | None = None,
        options: dict | None = None,
        horizon: int | None = None,
        validated: bool = False,
    ) -> list[HFForecast]:
        """Forecast every window with ``backend``; values in original units. A probabilistic
        head also returns each window's samples (seeded per window, so a series' forecast
        does not depend on what it was batched with)."""
        backend, resolved, steps = predict_call(self, backend, options, horizon, validated)
        if not windows:
            return []
        opts = {k: v for k, v in (resolved or {}).items() if v is not None}
        means: Sequence[np.ndarray] | np.ndarray
        samples: Sequence[np.ndarray] | None
        with backend_scope(backend, opts):
            if isinstance(self.family, PatchTSTFamily):
                means, samples = self._patchtst(windows)
            else:
                means, samples = self._seq2seq(windows)
        out = []
        for i, w in enumerate(windows):
            stamps = None
            if w.last_timestamp is not None and w.step_seconds is not None:
                offsets = np.arange(1, steps + 1, dtype=np.int64) * w.step_seconds
                stamps = format_timestamps(w.last_timestamp + offsets.astype("timedelta64[s]"))
            sample = samples[i] if samples is not None else None
            out.append(HFForecast(stamps, means[i][:steps].tolist(), sample))
        return out

    def check_future(self, window: HFWindow, steps: int) -> None:
        """``ModelInputError`` when ``steps`` forecasts after ``window`` pass the largest date."""
        check_future_fits(window.last_timestamp, steps, window.step_seconds)

    def with_precision(self, precision: str) -> HFForecaster:
        """This forecaster in ``precision``: itself in its own, else a new forecaster over a
        converted copy of the network (:func:`models.precision.convert_network`), in the
        precisions its family runs (:mod:`models.hf_forecast.families`).

        Raises:
            ValueError: a precision its family does not run, or this forecaster is not float32.
        """
        if precision == self.precision:
            return self
        if precision not in self.family.precisions:
            raise ValueError(
                f"{self.model_type} runs in float32 only here, not {precision} (bfloat16: "
                "PatchTST with a point head)"
            )
        needs_conversion(self.precision, precision)  # from float32 only
        model = convert_network(self.model, precision)
        return type(self)(self.name, model, self.sidecar, self.directory, self.trained_prob)

    def _patchtst(self, windows: list[HFWindow]) -> tuple[np.ndarray, list[np.ndarray] | None]:
        f = self.family
        assert isinstance(f, PatchTSTFamily)
        x = torch.from_numpy(np.stack([w.values for w in windows])).to(self.device, self.dtype)
        mean, state = f.forecast(x)
        means = mean.double().cpu().numpy()
        if state is None:
            return means, None
        samples = [f.sample(state, i, w.seed).double().cpu().numpy() for i, w in enumerate(windows)]
        return means, samples

    def _seq2seq(self, windows: list[HFWindow]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        f = self.family
        assert isinstance(f, Seq2SeqFamily)
        means, samples = [], []
        for w in windows:  # one generate per window: its samples then depend on its seed alone
            sample = f.generate(self._generate_inputs(w), w.seed).double().cpu().numpy()
            samples.append(sample)
            means.append(sample.mean(axis=0))
        return means, samples

    def _generate_inputs(self, w: HFWindow) -> dict[str, torch.Tensor]:
        f = self.family
        dev = self.device
        values = torch.from_numpy(w.values).to(dev)[None]  # [1, rows, c]
        if f.channels == 1:
            values = values[..., 0]
        rows = w.values.shape[0]
        feats = w.time_features
        if feats is None:
            feats = np.zeros((rows + self.horizon, 0), dtype=np.float32)
        t = torch.from_numpy(feats).to(dev)[None]
        kwargs = {
            "past_values": values,
            "past_observed_mask": torch.ones_like(values),
            "past_time_features": t[:, :rows],
            "future_time_features": t[:, rows:],
        }
        if w.static_categorical is not None:
            kwargs["static_categorical_features"] = torch.from_numpy(w.static_categorical).to(dev)[
                None
            ]
        if w.static_real is not None:
            kwargs["static_real_features"] = torch.from_numpy(w.static_real).to(dev)[None]
        return kwargs

    # ------------------------------------------------------------------ description

    def sample_history(self) -> dict[str, Any]:
        """A valid request series (``prepare``'s keyword arguments) for warm-up and calibration:
        a gentle wave around 1 in every channel, with the features the model needs."""
        rows = self.context
        t = np.arange(rows, dtype=np.float64)[:, None]
        values = 1.0 + 0.1 * np.sin(t / 8.0 + np.arange(len(self.channels))[None])
        series: dict[str, Any] = {"values": values}
        f = self.family
        if f.time_feature_width:
            series["time_features"] = np.zeros((rows + self.horizon, f.time_feature_width))
        if getattr(f, "static_categorical", 0):
            series["static_categorical"] = [0] * f.static_categorical
        if getattr(f, "static_real", 0):
            series["static_real"] = [0.0] * f.static_real
        return series

    def card(self) -> dict[str, Any]:
        """Everything ``GET /models`` shows about this model."""
        return describe(self)
