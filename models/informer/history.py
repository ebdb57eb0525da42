"""A history's numbers, as rows or as named columns, read into one array ``[steps, channels]``.

Shared by every forecaster the server hosts (ours and transformers' time-series folders): the
same payloads, the same checks, the same error messages naming the row or column at fault.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from models.errors import ModelInputError


def read_rows(
    values: Sequence[Sequence[float]] | np.ndarray, channels: Sequence[str]
) -> np.ndarray:
    """Rows as a float64 array ``[n, channels]``; the error names the first bad row."""
    n_ch = len(channels)
    if not isinstance(values, list | tuple | np.ndarray):
        raise ModelInputError("values must be a list of rows")
    try:  # one C-level conversion; the row-by-row walk below only runs to name an error
        raw = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raw = None
    if raw is not None and raw.ndim == 2 and raw.shape[1] == n_ch:
        return raw
    if raw is not None and raw.ndim == 1 and len(values) == 0:
        return raw.reshape(0, n_ch)
    for i, row in enumerate(values):
        # A row of an array (the schema's or the body-parsing helper's) has a length too.
        sized = isinstance(row, list | tuple | np.ndarray)
        if not sized or len(row) != n_ch:
            got = len(row) if sized else type(row).__name__
            raise ModelInputError(
                f"row {i} has {got} values; every row needs {n_ch} values, one per channel "
                f"({', '.join(channels)})"
            )
    raise ModelInputError("values must be numbers")


def read_columns(columns: Mapping[str, Sequence[float]], channels: Sequence[str]) -> np.ndarray:
    """Named columns as a float64 array ``[n, channels]`` in ``channels``' order."""
    if not isinstance(columns, Mapping):
        raise ModelInputError("columns must map each channel name to its list of values")
    missing = [c for c in channels if c not in columns]
    unknown = [c for c in columns if c not in channels]
    if missing or unknown:
        parts = [f"missing {', '.join(missing)}" if missing else ""]
        parts.append(f"unknown {', '.join(map(repr, unknown))}" if unknown else "")
        raise ModelInputError(
            f"columns must be exactly this model's channels ({', '.join(channels)}); "
            + "; ".join(p for p in parts if p)
        )
    lengths = {c: len(columns[c]) for c in channels}
    if len(set(lengths.values())) > 1:
        first = channels[0]
        odd = next(c for c in channels if lengths[c] != lengths[first])
        raise ModelInputError(
            f"every column needs the same number of values: {first} has {lengths[first]}, "
            f"{odd} has {lengths[odd]}"
        )
    try:
        by_channel = np.asarray([columns[c] for c in channels], dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelInputError("column values must be numbers") from None
    # Row-major like the rows layout, so both give bit-identical forecasts.
    return np.ascontiguousarray(by_channel.T)


def read_history(
    values: Sequence[Sequence[float]] | np.ndarray | None,
    columns: Mapping[str, Sequence[float]] | None,
    channels: Sequence[str],
) -> np.ndarray:
    """Exactly one of ``values`` (rows) or ``columns`` as ``[n, channels]`` float64."""
    if (values is None) == (columns is None):
        raise ModelInputError("give the history as either 'values' (rows) or 'columns'")
    return (
        read_rows(values, channels) if values is not None else read_columns(columns or {}, channels)
    )


def first_non_finite(raw: np.ndarray, offset: int, channels: Sequence[str]) -> None:
    """Raise naming the first NaN or infinite value (row counted from the history's start)."""
    if not np.isfinite(raw).all():
        r, c = np.argwhere(~np.isfinite(raw))[0]
        raise ModelInputError(
            f"row {offset + int(r)}, channel {channels[c]} is {raw[r, c]}; values must be finite"
        )


class Forecaster(Protocol):
    """What every forecaster declares (ours, a transformers folder's, a zero-shot one's): what
    :func:`predict_call` needs, and the window length the serving layer reads."""

    horizon: int
    default_attention: str
    context: int  # every window's length (a zero-shot forecaster's longest)

    def check_horizon(self, horizon: int | None) -> int: ...

    def check_attention(self, backend: str, options: dict | None = None) -> dict: ...


def predict_call(
    forecaster: Forecaster,
    backend: str | None,
    options: dict | None,
    horizon: int | None,
    validated: bool,
) -> tuple[str, dict[str, Any] | None, int]:
    """A ``predict`` call's backend (the forecaster's default when None), options (resolved,
    unless ``validated``: the server checked them once per request) and steps to return.

    Raises:
        ModelInputError: a horizon out of range; ``AttentionError``: a bad backend or option.
    """
    backend = backend or forecaster.default_attention
    if validated:
        return backend, options, horizon or forecaster.horizon
    steps = forecaster.check_horizon(horizon)
    return backend, forecaster.check_attention(backend, options), steps


def check_horizon(horizon: int | None, limit: int, name: str) -> int:
    """The horizon to return (``limit``, the model's, when None); ``ModelInputError`` when it is
    not an integer in ``[1, limit]``."""
    if horizon is None:
        return limit
    if isinstance(horizon, bool) or not isinstance(horizon, int):
        raise ModelInputError(f"horizon must be an integer, got {horizon!r}")
    if not 1 <= horizon <= limit:
        raise ModelInputError(
            f"horizon must be between 1 and {limit} for {name}, got {horizon}; "
            "use a model with a longer horizon"
        )
    return horizon
