"""Calendar (time-stamp) features, timestamp parsing and regularity checks.

Informer's ``embed='timeF'`` encodes each timestamp as a few calendar coordinates, each scaled to
[-0.5, 0.5] (Informer2020 ``utils/timefeatures.py``, after GluonTS ``time_feature``). For hourly
data these are hour of day, day of week, day of month and day of year, in that order.

Timestamps travel as ``datetime64[s]`` arrays and every calendar field is computed with integer
arithmetic on them: a request's few hundred stamps cost microseconds, where the same work through
pandas ``DatetimeIndex`` attributes costs milliseconds per request on the serving path.
"""

from __future__ import annotations

import re
import warnings
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

Stamps = np.ndarray  # datetime64[s], one dimension or more
_SECONDS = "datetime64[s]"
# 1970-01-01 was a Thursday: day_of_week (Monday = 0) is (days since the epoch + 3) mod 7.
_EPOCH_WEEKDAY = 3
# The data's own shape ("2017-10-24 00:00:00", or with a "T"), parsed by numpy directly; anything
# else (other ISO 8601 forms, time zones, fractions) goes through pandas.
_CANONICAL = re.compile(r"(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\n)*")


def as_stamps(index: pd.DatetimeIndex | Stamps | Sequence[np.datetime64]) -> Stamps:
    """``index`` as a ``datetime64[s]`` array (a pandas index, or an array already)."""
    return np.asarray(index, dtype=_SECONDS)


def step_seconds(freq: str) -> int:
    """Seconds between consecutive rows at ``freq``."""
    return int(FREQ_STEPS[freq].total_seconds())


def time_features(index: pd.DatetimeIndex | Stamps, freq: str = "h") -> np.ndarray:
    """Calendar features ``[..., f]`` (float32) in [-0.5, 0.5] for timestamps at ``freq``.

    Accepts a pandas ``DatetimeIndex`` or a ``datetime64`` array of any shape; values equal
    pandas' ``.hour / 23 - 0.5`` etc. exactly.
    """
    if freq not in FEATURE_NAMES:
        raise ValueError(f"unsupported freq {freq!r}; supported: {', '.join(FEATURE_NAMES)}")
    stamps = as_stamps(index)
    seconds = stamps.astype(np.int64)
    days = stamps.astype("datetime64[D]")
    day_number = days.astype(np.int64)
    cols = {
        "minute_of_hour": lambda: (seconds // 60) % 60 / 59.0 - 0.5,
        "hour_of_day": lambda: (seconds // 3600) % 24 / 23.0 - 0.5,
        "day_of_week": lambda: (day_number + _EPOCH_WEEKDAY) % 7 / 6.0 - 0.5,
        "day_of_month": lambda: (days - days.astype("datetime64[M]")).astype(np.int64) / 30.0 - 0.5,
        "day_of_year": lambda: (days - days.astype("datetime64[Y]")).astype(np.int64) / 365.0 - 0.5,
    }
    return np.stack([cols[n]().astype(np.float32) for n in FEATURE_NAMES[freq]], axis=-1)


def parse_timestamps(timestamps: Sequence[str]) -> Stamps:
    """Parse strings into a ``datetime64[s]`` array; ``ValueError`` naming the first bad entry,
    or saying why (time zones, fractions of a second) the stamps cannot be used."""
    if all(isinstance(t, str) for t in timestamps) and _CANONICAL.fullmatch(
        "".join(t + "\n" for t in timestamps)
    ):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return np.array(timestamps, dtype=_SECONDS)
        except ValueError:
            pass  # e.g. month 13: pandas below names the entry
    return _parse_with_pandas(timestamps)


def _parse_with_pandas(timestamps: Sequence[str]) -> Stamps:
    try:
        index = pd.DatetimeIndex(pd.to_datetime(list(timestamps), format="ISO8601"))
    except (ValueError, TypeError) as exc:
        for i, ts in enumerate(timestamps):
            try:
                pd.Timestamp(ts)
            except (ValueError, TypeError):
                raise ValueError(f"timestamp {i} ({ts!r}) is not a date-time") from None
        raise ValueError(f"timestamps could not be parsed: {exc}") from None
    if index.tz is not None:
        raise ValueError("timestamps must be naive local times (no time zone), as in the data")
    if index.hasnans:
        i = int(np.flatnonzero(index.isna())[0])
        raise ValueError(f"timestamp {i} ({timestamps[i]!r}) is not a date-time")
    if (index != index.floor("s")).any():
        raise ValueError("timestamps must be whole seconds")
    return as_stamps(index)


def check_regular(stamps: Stamps, freq: str) -> None:
    """Raise ``ValueError`` unless consecutive stamps are exactly one ``freq`` step apart (and,
    hourly, on the hour)."""
    if isinstance(stamps, pd.DatetimeIndex) and stamps.tz is not None:
        raise ValueError("timestamps must be naive local times (no time zone), as in the data")
    seconds = as_stamps(stamps).astype(np.int64)
    step = step_seconds(freq)
    diffs = np.diff(seconds)
    bad = np.flatnonzero(diffs != step)
    if bad.size:
        i = int(bad[0])
        a, b = format_timestamps(as_stamps(stamps)[i : i + 2])
        raise ValueError(
            f"timestamps must be regular at one step of {FREQ_STEPS[freq]} (freq '{freq}'); "
            f"{a} -> {b} (rows {i}, {i + 1}) is {pd.Timedelta(seconds=int(diffs[i]))}"
        )
    if freq == "h" and (seconds % 3600).any():
        raise ValueError("hourly timestamps must fall on the hour (minutes and seconds zero)")


def future_index(last: np.datetime64 | Stamps, steps: int, freq: str) -> Stamps:
    """The ``steps`` timestamps after ``last`` at ``freq``: ``[steps]`` for one stamp,
    ``[n, steps]`` for an array of ``n`` last stamps."""
    offsets = np.arange(1, steps + 1, dtype=np.int64) * step_seconds(freq)
    lasts = as_stamps(last)
    return lasts[..., None] + offsets.astype("timedelta64[s]")


def format_timestamps(stamps: pd.DatetimeIndex | Stamps) -> list[str]:
    """Timestamps as ``YYYY-MM-DD HH:MM:SS`` strings, the data's own format (a flat list)."""
    text = np.datetime_as_string(as_stamps(stamps).ravel(), unit="s")
    return [t.replace("T", " ") for t in text.tolist()]
