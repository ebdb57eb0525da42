"""A transformers forecaster's request series, checked: the clock (optional timestamps or
``start``) and the covariates the encoder-decoder classes take. The history's numbers are read
by :mod:`models.informer.history`, as for our own forecasters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.errors import ModelInputError
from models.informer.history import first_non_finite
from models.informer.timefeatures import (
    check_regular,
    freq_step,
    infer_freq,
    parse_timestamps,
    regular_stamps,
    step_seconds,
)

SAMPLE_SEED = 0  # a request's seed when it gives none: the same request, the same answer


@dataclass
class HFWindow:
    """One validated history, ready to batch.

    Attributes:
        values: the last ``history_rows`` rows ``[rows, channels]`` (float32, original units).
        last_timestamp: the last row's time (None when the request gave none).
        step_seconds: the step the forecast continues at (None without timestamps).
        time_features: ``[rows + horizon, F]`` covariates (encoder–decoder classes), else None.
        static_categorical, static_real: the series' static features, else None.
        seed: sampling seed of this series (probabilistic heads).
    """

    values: np.ndarray
    last_timestamp: np.datetime64 | None = None
    step_seconds: int | None = None
    time_features: np.ndarray | None = None
    static_categorical: np.ndarray | None = None
    static_real: np.ndarray | None = None
    seed: int = SAMPLE_SEED


def read_clock(
    timestamps: Sequence[str] | None, start: str | None, n: int, freq: str | None, name: str
) -> tuple[np.datetime64 | None, int | None]:
    """The last stamp and the step, from ``timestamps`` or ``start`` (None, None: neither);
    ``freq`` is the folder's step when it records one."""
    if timestamps is None and start is None:
        return None, None
    try:
        if start is not None:
            if freq is None:
                raise ModelInputError(
                    f"{name} has no step of its own: give 'timestamps' (evenly spaced), "
                    "or none; 'start' needs a freq in the folder's attnserve.json"
                )
            stamps = regular_stamps(str(start), n, freq)
            return stamps[-1], step_seconds(freq)
        if not isinstance(timestamps, list | tuple):
            raise ModelInputError("timestamps must be a list")
        if len(timestamps) != n:
            raise ModelInputError(
                f"got {len(timestamps)} timestamps but {n} value rows; give one per row"
            )
        stamps = parse_timestamps(timestamps)
        if freq is not None:
            check_regular(stamps, freq)
            return stamps[-1], step_seconds(freq)
        freq = infer_freq(stamps)  # raises unless every step is the same
        return stamps[-1], int(freq_step(freq).total_seconds())
    except ValueError as exc:
        if isinstance(exc, ModelInputError):
            raise
        raise ModelInputError(f"timestamps: {exc}") from None


def read_features(
    window: HFWindow,
    f: Any,
    n: int,
    name: str,
    time_features: Sequence[Sequence[float]] | None,
    static_categorical: Sequence[int] | None,
    static_real: Sequence[float] | None,
) -> None:
    """Check the covariates the model family ``f`` takes and set them on ``window``."""
    width = f.time_feature_width
    if width == 0:
        if time_features is not None:
            raise ModelInputError(f"{name} takes no time_features")
    else:
        if time_features is None:
            raise ModelInputError(
                f"{name} needs time_features: {width} values per row for every history "
                f"row and the {f.horizon} forecast rows after it (the covariates it was "
                "trained with, e.g. calendar features and age)"
            )
        feats = np.asarray(time_features, dtype=np.float64)
        if feats.ndim != 2 or feats.shape != (n + f.horizon, width):
            raise ModelInputError(
                f"time_features must be {n + f.horizon} rows ({n} history + {f.horizon} "
                f"horizon) of {width} values, got shape {list(feats.shape)}"
            )
        first_non_finite(feats, 0, [f"feature {i}" for i in range(width)])
        window.time_features = feats[-(f.history_rows + f.horizon) :].astype(np.float32)
    k = getattr(f, "static_categorical", 0)
    if k == 0 and static_categorical is not None:
        raise ModelInputError(f"{name} takes no static_categorical features")
    if k:
        cats = np.asarray(
            static_categorical if static_categorical is not None else [], dtype=np.int64
        )
        if cats.shape != (k,):
            raise ModelInputError(f"{name} needs static_categorical: {k} integers")
        limits = f.cardinality
        for i, (value, limit) in enumerate(zip(cats.tolist(), limits, strict=True)):
            if not 0 <= value < limit:
                raise ModelInputError(
                    f"static_categorical[{i}] must be in [0, {limit}), got {value}"
                )
        window.static_categorical = cats
    r = getattr(f, "static_real", 0)
    if r == 0 and static_real is not None:
        raise ModelInputError(f"{name} takes no static_real features")
    if r:
        reals = np.asarray(static_real if static_real is not None else [], dtype=np.float64)
        if reals.shape != (r,) or not np.isfinite(reals).all():
            raise ModelInputError(f"{name} needs static_real: {r} finite numbers")
        window.static_real = reals.astype(np.float32)
