"""The servable Informer: validated inputs in original units, batched forecasts out.

The service calls :meth:`InformerForecaster.prepare` on each series (raising ``ModelInputError``
with a readable reason for anything it cannot take), batches the resulting windows and calls
:meth:`InformerForecaster.predict` with the backend the request named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.attention import AttentionError, InputSpec, get_backend
from models.attention.registry import option_refusals
from models.compile import bucket_for, compile_forward, pad_rows
from models.errors import ModelInputError
from models.informer.checkpoint import load_checkpoint, scaler_of, shipped_dirs
from models.informer.history import check_horizon, first_non_finite, predict_call, read_history
from models.informer.memory import forward_bytes, forward_work
from models.informer.model import Informer, attention_plan, backend_cards
from models.informer.timefeatures import (
    check_future_fits,
    check_regular,
    format_timestamps,
    freq_step,
    future_index,
    parse_timestamps,
    regular_stamps,
    step_seconds,
    time_features,
)
from models.names import DEFAULT_BATCH_BUCKETS
from models.precision import needs_conversion, precision_of
from models.quality_file import backends_of, card_quality, read_quality

# A scaled value further than this from the training mean (in training standard deviations) is
# taken as a unit or data error, not a reading: ETTh1's whole history stays within ~10.
MAX_ABS_SCALED = 1000.0


@dataclass
class ForecastWindow:
    """One validated history, ready to batch.

    Attributes:
        values: scaled history ``[context, channels]`` (float32).
        marks: calendar features of those rows ``[context, features]`` (float32).
        last_timestamp: time of the last history row (``datetime64[s]``); forecasts start one
            step later.
    """

    values: np.ndarray
    marks: np.ndarray
    last_timestamp: np.datetime64


@dataclass
class Forecast:
    """A forecast in original units: ``values[t][c]`` at ``timestamps[t]``."""

    timestamps: list[str]
    values: list[list[float]]


def shipped_models() -> list[str]:
    """Names of the Informer checkpoints under ``models/weights/``."""
    return list(shipped_dirs())


class InformerForecaster:
    """A loaded Informer checkpoint with its scaler, calendar and attention plan."""

    probabilistic = False  # point forecasts (MSE-trained), no samples
    extra_inputs: tuple[str, ...] = ()  # a history and its timestamps only

    def __init__(
        self,
        name: str,
        model: Informer,
        meta: dict[str, Any],
        directory: Path,
        precision: str | None = None,
    ) -> None:
        """``precision``: what ``model`` was converted to (None: its weights' dtype; an int8
        network's float parts are float32, so it is named)."""
        self.name = name
        self.model = model
        self.meta = meta
        self.directory = directory
        self.scaler = scaler_of(meta)
        self.context: int = int(meta["context"])
        self.label_len: int = int(meta["label_len"])
        self.horizon: int = int(meta["horizon"])
        self.channels: list[str] = list(meta["channels"])
        self.freq: str = meta["freq"]
        # The backend the checkpoint was trained with (older checkpoints: ProbSparse).
        self.default_attention: str = model.config.default_attention
        self.device = next(model.parameters()).device
        self.precision = precision or precision_of(model.compute_dtype)
        self.compiled_backends: frozenset[str] = frozenset()
        self.batch_buckets: tuple[int, ...] = ()
        self._compiled: Any = None
        self.quality = read_quality(directory / "quality.json")

    @classmethod
    def load(cls, name_or_path: str, device: str = "cpu") -> InformerForecaster:
        """Load a shipped model by name (``informer-etth1-h24``) or a checkpoint folder path."""
        shipped = shipped_dirs()
        directory = shipped.get(name_or_path) or Path(name_or_path)
        if not (directory / "config.json").is_file():
            valid = ", ".join(shipped) or "none"
            raise FileNotFoundError(
                f"no Informer checkpoint {name_or_path!r}; shipped models: {valid}"
            )
        model, meta = load_checkpoint(directory, device)
        return cls(directory.name, model, meta, directory)

    def with_precision(self, precision: str) -> InformerForecaster:
        """This forecaster in ``precision`` (:mod:`models.precision`): a new forecaster over a
        converted copy of the network (float32: this one), with the same scaler, calendar and
        quality figures. RevIN and the linear path stay float32 (:meth:`Informer.to_precision`).

        Raises:
            ValueError: this forecaster is not float32, or an unknown precision.
        """
        if not needs_conversion(self.precision, precision):
            return self
        model = self.model.to_precision(precision)
        return type(self)(self.name, model, self.meta, self.directory, precision)

    # ------------------------------------------------------------------ input validation

    def prepare(
        self,
        timestamps: Sequence[str] | None = None,
        values: Sequence[Sequence[float]] | None = None,
        *,
        start: str | None = None,
        columns: Mapping[str, Sequence[float]] | None = None,
    ) -> ForecastWindow:
        """Validate one history and turn it into a scaled window of the last ``context`` rows.

        Two layouts, the same result: rows (``values``, one list of channels per step) or
        columns (``columns``, one list of steps per channel name: no per-row objects to build,
        the compact form for long histories). Time comes either as one timestamp per row
        (``timestamps``) or as the first one (``start``), the rest following at the model's step.

        Raises:
            ModelInputError: both or neither layout or time given, too few rows, row/timestamp
                count mismatch, wrong or ragged channel counts, unknown or missing channel names,
                non-numeric / NaN / infinite / implausibly large values, unparsable timestamps,
                or timestamps not regular at the model's frequency.
        """
        if (values is None) == (columns is None):
            raise ModelInputError("give the history as either 'values' (rows) or 'columns'")
        if (timestamps is None) == (start is None):
            raise ModelInputError(
                "give either 'timestamps' (one per row) or 'start' (the first row's timestamp)"
            )
        raw = read_history(values, columns, self.channels)
        n = len(raw)
        if timestamps is not None:
            if not isinstance(timestamps, list | tuple):
                raise ModelInputError("timestamps must be a list")
            if len(timestamps) != n:
                raise ModelInputError(
                    f"got {len(timestamps)} timestamps but {n} value rows; give one timestamp per row"
                )
        if n < self.context:
            raise ModelInputError(
                f"{self.name} needs at least {self.context} rows of history, got {n}; "
                f"send the last {self.context} rows at one step of {freq_step(self.freq)} "
                "(longer histories are trimmed)"
            )
        raw = raw[-self.context :]
        first_non_finite(raw, n - self.context, self.channels)
        scaled = self.scaler.transform(raw)
        if np.abs(scaled).max() > MAX_ABS_SCALED:
            r, c = np.unravel_index(int(np.abs(scaled).argmax()), scaled.shape)
            at = n - self.context + int(r)
            raise ModelInputError(
                f"row {at}, channel {self.channels[c]} = {raw[r, c]:g} is implausibly large for "
                f"this model (over {MAX_ABS_SCALED:g} training standard deviations from the mean); "
                "check the units"
            )
        try:
            if timestamps is not None:
                stamps = parse_timestamps(timestamps)
                check_regular(stamps, self.freq)
                stamps = stamps[-self.context :]
            else:
                stamps = regular_stamps(str(start), n, self.freq)[-self.context :]
        except ValueError as exc:
            if timestamps is not None:
                raise ModelInputError(str(exc)) from None
            reason = str(exc).replace(f"timestamp 0 ({start!r}) ", "it ")
            raise ModelInputError(f"start {start!r}: {reason}") from None
        return ForecastWindow(
            values=scaled.astype(np.float32),
            marks=time_features(stamps, self.freq),
            last_timestamp=stamps[-1],
        )

    def check_future(self, window: ForecastWindow, steps: int) -> None:
        """``ModelInputError`` when ``steps`` forecast timestamps after ``window`` would run past
        the largest date (see :func:`~models.informer.timefeatures.check_future_fits`)."""
        check_future_fits(window.last_timestamp, steps, step_seconds(self.freq))

    # ------------------------------------------------------------------ compilation

    def compile(
        self,
        backends: list[str],
        batch_buckets: tuple[int, ...] = DEFAULT_BATCH_BUCKETS,
        mode: str = "default",
        compiler: str = "inductor",
    ) -> None:
        """Run ``backends`` through a ``torch.compile``-d forward from now on, with every batch
        padded to the next of ``batch_buckets`` rows (see :mod:`models.compile`). The graphs
        compile on first use: run :meth:`warmup_batch_sizes` batches before serving."""
        for backend in backends:
            self.check_attention(backend)
        self.batch_buckets = tuple(sorted(set(batch_buckets)))
        graphs = len(backends) * len(self.batch_buckets)
        self._compiled = compile_forward(self.model, graphs, mode, compiler)
        self.compiled_backends = frozenset(backends)

    def warmup_batch_sizes(self, backend: str) -> list[int]:
        """Batch sizes that compile every graph of ``backend`` (one eager size if not compiled)."""
        return list(self.batch_buckets) if backend in self.compiled_backends else [2]

    # ------------------------------------------------------------------ inference

    def check_attention(self, backend: str, options: dict | None = None) -> dict:
        """Resolved options for ``backend`` (model defaults filled in); ``AttentionError`` if the
        name or an option is invalid."""
        opts = dict(options or {})
        if backend == "probsparse" and "factor" not in opts:
            opts["factor"] = self.model.config.factor
        resolved = get_backend(backend).resolve_options(opts)
        # Layers a backend cannot run fall back to exact attention, but an option this device
        # cannot honour is refused, as the text models refuse it (the encoder's first layer).
        config = self.model.config
        n = config.encoder_lengths()[0]
        spec = InputSpec(n, n, config.head_dim, self.model.compute_dtype, self.device.type)
        reasons = option_refusals(backend, spec, opts)
        if reasons:
            raise AttentionError("; ".join(reasons))
        return resolved

    def layer_backends(self, backend: str) -> dict[str, str]:
        """Which backend each attention layer runs when ``backend`` is requested."""
        return {k: v.backend for k, v in self._plan(backend).items()}

    def _plan(self, backend: str, options: dict | None = None) -> dict:
        dtype = self.model.compute_dtype
        return attention_plan(self.model.config, backend, options, None, dtype, self.device.type)

    def memory_estimate(self, backend: str, options: dict | None = None, rows: int = 1) -> int:
        """Estimated peak activation bytes of :meth:`predict` on ``rows`` windows with
        ``backend`` (see :mod:`models.informer.memory`), in the weights' dtype (under CUDA
        autocast the linear layers' bf16 activations take less). A compiled backend's batch is
        padded to its bucket first, so it is priced at the bucket."""
        if backend in self.compiled_backends:
            rows = bucket_for(rows, self.batch_buckets) or rows
        itemsize = self.model.compute_dtype.itemsize
        plan = self._plan(backend, options)
        return forward_bytes(self.model.config, plan, rows, itemsize, self.device.type)

    def work_estimate(self, backend: str, options: dict | None = None, rows: int = 1) -> float:
        """Flop-equivalents of :meth:`predict` on ``rows`` windows with ``backend`` (see
        :func:`models.informer.memory.forward_work`; a compiled backend's batch is priced at
        its padded bucket)."""
        if backend in self.compiled_backends:
            rows = bucket_for(rows, self.batch_buckets) or rows
        return forward_work(self.model.config, self._plan(backend, options), rows)

    def check_horizon(self, horizon: int | None) -> int:
        """The horizon to return (the model's when None); ``ModelInputError`` when out of range."""
        return check_horizon(horizon, self.horizon, self.name)

    @torch.inference_mode()
    def predict(
        self,
        windows: list[ForecastWindow],
        backend: str | None = None,
        options: dict | None = None,
        horizon: int | None = None,
        validated: bool = False,
    ) -> list[Forecast]:
        """Forecast every window in one batched forward pass; values in original units.

        The model always predicts its full horizon; a shorter ``horizon`` returns the first steps.
        ``backend`` None means the checkpoint's default attention. ``validated``: the caller has
        already checked the backend, options and horizon (the server checks once per request).
        """
        # The network resolves the options itself: the ones given are passed on as they are.
        backend, _, steps = predict_call(self, backend, options, horizon, validated)
        if not windows:
            return []
        dev, L, H = self.device, self.label_len, self.horizon
        x = torch.from_numpy(np.stack([w.values for w in windows])).to(dev)  # [b, context, c]
        mark = torch.from_numpy(np.stack([w.marks for w in windows])).to(dev)  # [b, context, f]
        futures = future_index(np.stack([w.last_timestamp for w in windows]), H, self.freq)
        fut_marks = time_features(futures, self.freq)  # [b, H, f]
        x_dec = torch.cat([x[:, -L:], x.new_zeros(x.shape[0], H, x.shape[2])], dim=1)
        mark_dec = torch.cat([mark[:, -L:], torch.from_numpy(fut_marks).to(dev)], dim=1)
        forward, n = self.model, len(windows)
        bucket = bucket_for(n, self.batch_buckets) if backend in self.compiled_backends else None
        if bucket is not None:
            forward = self._compiled
            x, mark, x_dec, mark_dec = (pad_rows(t, bucket) for t in (x, mark, x_dec, mark_dec))
        out = forward(x, mark, x_dec, mark_dec, backend, options)[:n]  # [b, H, c]
        values = self.scaler.inverse(out[:, :steps].double().cpu().numpy())
        stamps = format_timestamps(futures[:, :steps])
        return [
            Forecast(stamps[i * steps : (i + 1) * steps], v.tolist()) for i, v in enumerate(values)
        ]

    # ------------------------------------------------------------------ description

    def sample_history(self) -> dict[str, Any]:
        """A valid request series (``prepare``'s keyword arguments) for warm-up and calibration:
        the training mean at regular timestamps, always in range."""
        stamps = regular_stamps("2017-01-02 00:00:00", self.context, self.freq)
        mean = np.asarray(self.scaler.mean, dtype=np.float64)
        return {"timestamps": format_timestamps(stamps), "values": np.tile(mean, (self.context, 1))}

    def card(self) -> dict[str, Any]:
        """Everything ``GET /models`` shows about this model."""
        backends = backend_cards(self._plan, backends_of(self.quality))
        c = self.model.config
        return {
            "name": self.name,
            "task": "forecast",
            "architecture": "Informer (Zhou et al., AAAI 2021)",
            "context": self.context,
            "horizon": self.horizon,
            "label_len": self.label_len,
            "channels": self.channels,
            "freq": self.freq,
            "default_attention": self.default_attention,
            "revin": c.revin,
            "channel_independent": c.channel_independent,
            "patch_len": c.patch_len,
            "linear_path": c.linear_path,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "backends": backends,
            "quality": card_quality(self.quality),
        }
