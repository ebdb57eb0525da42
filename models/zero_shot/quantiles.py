"""Quantile levels a request asks of a model that answers a fixed set of levels.

A level the model has is its own column. A level between two it has is interpolated linearly
between them, as Chronos-2's pipeline does (``chronos.utils.interpolate_quantiles``); a level
outside the model's range is refused, naming the range (the pipeline clamps with a warning,
which hides that the answer is the model's outermost level)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.errors import ModelInputError


def check_levels(wanted: Sequence[float], levels: Sequence[float], name: str) -> None:
    """``ModelInputError`` unless every wanted level lies within the model's levels."""
    low, high = min(levels), max(levels)
    outside = [q for q in wanted if not low - 1e-12 <= q <= high + 1e-12]
    if outside:
        listed = ", ".join(f"{q:g}" for q in levels)
        raise ModelInputError(
            f"{name} answers quantile levels {listed}; levels in between are interpolated, "
            f"but {', '.join(f'{q:g}' for q in outside)} lie outside [{low:g}, {high:g}]"
        )


def at_levels(wanted: Sequence[float], levels: Sequence[float], values: np.ndarray) -> np.ndarray:
    """``values`` ``[len(levels), ...]`` at the ``wanted`` levels ``[len(wanted), ...]``: a
    model's own level exactly, others linearly between the two levels around them."""
    grid = np.asarray(levels, dtype=np.float64)
    out = []
    for q in wanted:
        hit = np.flatnonzero(np.isclose(grid, q, rtol=0, atol=1e-9))
        if hit.size:
            out.append(values[int(hit[0])])
            continue
        upper = int(np.searchsorted(grid, q))
        lower = upper - 1
        weight = (q - grid[lower]) / (grid[upper] - grid[lower])
        out.append(values[lower] + weight * (values[upper] - values[lower]))
    return np.stack(out)
