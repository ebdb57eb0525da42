"""The scores of a zero-shot forecaster's evaluation (:mod:`.zero_shot`) and its
seasonal-naive baseline, in plain numpy.

- **MSE / MAE** in the train split's standardised units (each channel's error over its train
  standard deviation), as every other forecaster's ``quality.json`` records them.
- **MASE** (Hyndman & Koehler, "Another look at measures of forecast accuracy", IJF 2006): a
  window's mean absolute error over the in-sample seasonal-naive error of its channel, that is
  the mean ``|y_t - y_(t-m)|`` over every row of the file before the forecast starts (the
  series' whole past, as GluonTS's ``seasonal_error`` takes the past it is given); averaged over
  windows and channels. A channel with no in-sample change (a constant past) has no scale and
  is left out of the average.
- **WQL**, the weighted quantile loss (Gneiting & Raftery, "Strictly proper scoring rules,
  prediction, and estimation", JASA 2007, Sec. 9.3, the pinball/quantile score; weighted and
  summed as GluonTS's ``weighted_quantile_loss`` and the Chronos paper, Ansari et al. 2024,
  Sec. 5.2): for each level ``q``, ``2 * sum pinball_q / sum |y|`` over every window, step and
  channel scored, in original units; then the mean over the model's levels. A point forecast (a
  baseline) is scored with the point at every level.

Dimension legend: ``w`` windows, ``n`` context steps, ``h`` horizon steps, ``c`` channels,
``q`` quantile levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from models.informer.timefeatures import freq_step

DAY_SECONDS = 86_400


def infer_season(freq: str) -> int:
    """The seasonal period of a step, in steps: one day for sub-daily steps that divide it
    (24 hourly, 96 at 15 minutes), a week for daily data, else 1 (no season assumed)."""
    try:
        seconds = int(freq_step(freq).total_seconds())
    except ValueError:
        return 1
    if seconds < DAY_SECONDS and DAY_SECONDS % seconds == 0:
        return DAY_SECONDS // seconds
    if seconds == DAY_SECONDS:
        return 7
    return 1


def seasonal_naive(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """``[w, h, c]``: each step repeats the value one season earlier in ``history``
    ``[w, n, c]`` (``season`` 1: the last value), cycling the last season for long horizons."""
    last = history[:, -season:]  # [w, m, c]
    return last[:, np.arange(horizon) % season]


def insample_scales(values: np.ndarray, ends: np.ndarray, season: int) -> np.ndarray:
    """``[w, c]``: the mean ``|y_t - y_(t-season)|`` over rows ``[0, end)`` of ``values``
    ``[rows, c]`` for each ``end`` of ``ends`` (NaN where that past is constant)."""
    diffs = np.abs(values[season:] - values[:-season])  # row t - season's change to row t
    total = np.concatenate([np.zeros((1, values.shape[1])), np.cumsum(diffs, axis=0)])
    count = (ends - season)[:, None]  # changes inside rows [0, end)
    scale = total[ends - season] / count
    return np.where(scale > 0, scale, np.nan)


@dataclass
class Scores:
    """Sums of every error over the windows added so far; :meth:`figures` reads them out."""

    levels: tuple[float, ...]
    se: float = 0.0
    ae: float = 0.0
    count: int = 0
    mase: list[np.ndarray] = field(default_factory=list)
    pinball: np.ndarray = field(default_factory=lambda: np.zeros(0))
    abs_target: float = 0.0

    def add(
        self,
        point: np.ndarray,
        quantiles: np.ndarray | None,
        target: np.ndarray,
        std: np.ndarray,
        scales: np.ndarray,
    ) -> None:
        """One chunk of windows: ``point`` and ``target`` ``[w, h, c]`` and ``quantiles``
        ``[w, q, h, c]`` (None: the point at every level) in original units, the train ``std``
        ``[c]`` and the in-sample ``scales`` ``[w, c]``."""
        err = point - target
        self.se += float(np.square(err / std).sum())
        self.ae += float(np.abs(err / std).sum())
        self.count += err.size
        self.mase.append((np.abs(err).mean(axis=1) / scales).ravel())
        if quantiles is None:
            quantiles = np.repeat(point[:, None], len(self.levels), axis=1)
        q = np.asarray(self.levels)[None, :, None, None]
        gap = target[:, None] - quantiles  # [w, q, h, c]
        pinball = np.maximum(q * gap, (q - 1) * gap).sum(axis=(0, 2, 3))  # [q]
        self.pinball = pinball if not self.pinball.size else self.pinball + pinball
        self.abs_target += float(np.abs(target).sum())

    def figures(self) -> dict[str, float]:
        """``mse``, ``mae`` (scaled), ``mase`` and ``wql`` over everything added."""
        ratios = np.concatenate(self.mase)
        wql = 2 * self.pinball / self.abs_target if self.abs_target else np.full(1, np.nan)
        return {
            "mse": self.se / self.count,
            "mae": self.ae / self.count,
            "mase": float(np.nanmean(ratios)) if np.isfinite(ratios).any() else float("nan"),
            "wql": float(np.mean(wql)),
        }


def rounded(figures: dict[str, float], digits: int = 6) -> dict[str, float]:
    """``figures`` rounded for ``quality.json``."""
    return {k: round(v, digits) for k, v in figures.items()}


def score_baseline(
    levels: Sequence[float],
    point: np.ndarray,
    target: np.ndarray,
    std: np.ndarray,
    scales: np.ndarray,
) -> dict[str, float]:
    """The figures of a point forecast ``point`` ``[w, h, c]`` (a baseline) at once."""
    scores = Scores(tuple(levels))
    scores.add(point, None, target, std, scales)
    return scores.figures()
