"""The per-channel standard scaler a checkpoint carries: fit on the training rows
(:mod:`models.training`), stored in ``config.json``, applied by the forecaster to every request."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StandardScaler:
    """Per-channel ``(x - mean) / std``, fit on training rows only."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> StandardScaler:
        # Population std, as sklearn's StandardScaler (the reference) uses.
        return cls(values.mean(axis=0), values.std(axis=0))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.std

    def inverse(self, values: np.ndarray) -> np.ndarray:
        return values * self.std + self.mean
