"""Calendar (time-stamp) features, timestamp parsing and regularity checks.

Informer's ``embed='timeF'`` encodes each timestamp as a few calendar coordinates, each scaled to
[-0.5, 0.5] (Informer2020 ``utils/timefeatures.py``, after GluonTS ``time_feature``). For hourly
data these are hour of day, day of week, day of month and day of year, in that order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# Pandas offset alias per model frequency; only hourly models are trained here, ``t`` (15 min
# steps, ETTm) is accepted so the same code serves a minute-level model.
FREQ_STEPS: dict[str, pd.Timedelta] = {"h": pd.Timedelta(hours=1), "t": pd.Timedelta(minutes=15)}
FEATURE_NAMES: dict[str, tuple[str, ...]] = {
    "h": ("hour_of_day", "day_of_week", "day_of_month", "day_of_year"),
    "t": ("minute_of_hour", "hour_of_day", "day_of_week", "day_of_month", "day_of_year"),
}
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"


def time_features(index: pd.DatetimeIndex, freq: str = "h") -> np.ndarray:
    """Calendar features ``[n, f]`` (float32) in [-0.5, 0.5] for ``index`` at ``freq``."""
    if freq not in FEATURE_NAMES:
        raise ValueError(f"unsupported freq {freq!r}; supported: {', '.join(FEATURE_NAMES)}")
    cols = {
        "minute_of_hour": index.minute / 59.0 - 0.5,
        "hour_of_day": index.hour / 23.0 - 0.5,
        "day_of_week": index.day_of_week / 6.0 - 0.5,
        "day_of_month": (index.day - 1) / 30.0 - 0.5,
        "day_of_year": (index.day_of_year - 1) / 365.0 - 0.5,
    }
    return np.stack([np.asarray(cols[n], dtype=np.float32) for n in FEATURE_NAMES[freq]], axis=1)


def parse_timestamps(timestamps: Sequence[str]) -> pd.DatetimeIndex:
    """Parse strings into a ``DatetimeIndex``; ``ValueError`` naming the first bad entry."""
    try:
        return pd.DatetimeIndex(pd.to_datetime(list(timestamps), format="ISO8601"))
    except (ValueError, TypeError) as exc:
        for i, ts in enumerate(timestamps):
            try:
                pd.Timestamp(ts)
            except (ValueError, TypeError):
                raise ValueError(f"timestamp {i} ({ts!r}) is not a date-time") from None
        raise ValueError(f"timestamps could not be parsed: {exc}") from None


def check_regular(index: pd.DatetimeIndex, freq: str) -> None:
    """Raise ``ValueError`` unless consecutive stamps are exactly one ``freq`` step apart."""
    step = FREQ_STEPS[freq]
    if index.tz is not None:
        raise ValueError("timestamps must be naive local times (no time zone), as in the data")
    if len(index) < 2:
        return
    diffs = index[1:] - index[:-1]
    bad = np.flatnonzero(diffs != step)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"timestamps must be regular at one step of {step} (freq '{freq}'); "
            f"{index[i]} -> {index[i + 1]} (rows {i}, {i + 1}) is {diffs[i]}"
        )
    if freq == "h" and (index.minute != 0).any() | (index.second != 0).any():
        raise ValueError("hourly timestamps must fall on the hour (minutes and seconds zero)")


def future_index(last: pd.Timestamp, steps: int, freq: str) -> pd.DatetimeIndex:
    """The ``steps`` timestamps after ``last`` at ``freq``."""
    step = FREQ_STEPS[freq]
    return pd.DatetimeIndex([last + step * (i + 1) for i in range(steps)])


def format_timestamps(index: pd.DatetimeIndex) -> list[str]:
    """Timestamps as ``YYYY-MM-DD HH:MM:SS`` strings, the data's own format."""
    return [ts.strftime(TIMESTAMP_FORMAT) for ts in index]
