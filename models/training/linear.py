"""The closed-form linear forecaster (NLinear-style) that every Informer checkpoint must beat.

Zeng et al., "Are Transformers Effective for Time Series Forecasting?", AAAI 2023 (NLinear,
Sec. 4): subtract each window's last value, map the ``context`` steps to the ``horizon`` steps
with one linear layer shared by all channels, add the last value back. Here the map is not
trained by gradient descent but solved in closed form (ridge least squares) over every training
window of every channel, so the baseline is reproducible to the last digit and costs seconds.

The same map is the Informer's optional linear path (``InformerConfig.linear_path``): the model
starts from this baseline and its attention network learns only what the map misses.

Dimension legend: ``w`` windows, ``c`` channels, ``n`` context steps, ``h`` horizon steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Ridge strength per training row: small enough to leave the fit unchanged on real data (the
# last column of a last-value-subtracted window is always zero, so some is needed to stay
# solvable), large enough to keep short or flat series well posed.
DEFAULT_RIDGE = 1e-3
_CHUNK = 2048  # windows per accumulation step: bounds memory for long contexts


def sliding_windows(
    values: np.ndarray, context: int, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """Views ``[w, c, n]`` (history) and ``[w, c, h]`` (target) of every window of ``values``
    ``[rows, c]``, in the order of :class:`~models.training.data.ett.WindowDataset`."""
    both = sliding_window_view(values, context + horizon, axis=0)  # [w, c, n + h]
    return both[..., :context], both[..., context:]


@dataclass
class LinearBaseline:
    """``forecast = W·(x - x_last) + x_last`` per channel; ``weight`` is ``[n, h]``."""

    weight: np.ndarray
    ridge: float = DEFAULT_RIDGE

    @property
    def context(self) -> int:
        return int(self.weight.shape[0])

    @property
    def horizon(self) -> int:
        return int(self.weight.shape[1])

    @classmethod
    def fit(
        cls, values: np.ndarray, context: int, horizon: int, ridge: float = DEFAULT_RIDGE
    ) -> LinearBaseline:
        """Solve ``(XᵀX + λI) W = XᵀY`` over every window and channel of ``values`` ``[rows, c]``
        (scaled training rows), with ``λ = ridge · rows of X``."""
        if len(values) < context + horizon:
            raise ValueError(
                f"need at least {context + horizon} rows to fit a {context}->{horizon} map, "
                f"got {len(values)}"
            )
        x_all, y_all = sliding_windows(np.asarray(values, dtype=np.float64), context, horizon)
        xtx = np.zeros((context, context))
        xty = np.zeros((context, horizon))
        for s in range(0, len(x_all), _CHUNK):
            x, y = x_all[s : s + _CHUNK], y_all[s : s + _CHUNK]
            last = x[..., -1:]
            xs = (x - last).reshape(-1, context)
            ys = (y - last).reshape(-1, horizon)
            xtx += xs.T @ xs
            xty += xs.T @ ys
        rows = x_all.shape[0] * x_all.shape[1]
        weight = np.linalg.solve(xtx + ridge * rows * np.eye(context), xty)
        return cls(weight, ridge)

    def predict(self, history: np.ndarray) -> np.ndarray:
        """Forecasts ``[..., c, h]`` from histories ``[..., c, n]``."""
        last = history[..., -1:]
        return (history - last) @ self.weight + last

    def score(self, values: np.ndarray, stride: int = 1) -> tuple[float, float]:
        """MSE and MAE over every window of ``values`` ``[rows, c]`` (a split with its look-back
        prepended), counted exactly as the Informer's test metrics count them; with ``stride``
        k, over every k-th window (the windows ``evaluate --stride k`` scores a model on)."""
        x_all, y_all = sliding_windows(np.asarray(values, dtype=np.float64), *self.weight.shape)
        x_all, y_all = x_all[::stride], y_all[::stride]
        se = ae = 0.0
        for s in range(0, len(x_all), _CHUNK):
            err = self.predict(x_all[s : s + _CHUNK]) - y_all[s : s + _CHUNK]
            se += float(np.square(err).sum())
            ae += float(np.abs(err).sum())
        count = y_all.size
        return se / count, ae / count
