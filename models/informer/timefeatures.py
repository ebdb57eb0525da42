"""Calendar (time-stamp) features, timestamp parsing and regularity checks.

Informer's ``embed='timeF'`` encodes each timestamp as a few calendar coordinates, each scaled to
[-0.5, 0.5] (Informer2020 ``utils/timefeatures.py``, after GluonTS ``time_feature``). For hourly
data these are hour of day, day of week, day of month and day of year, in that order.

A model frequency is any fixed-length pandas step alias (``"15min"``, ``"h"``, ``"2h"``, ``"D"``,
``"7D"``), plus the legacy ``"t"``, which means 15 minutes here (ETTm), not pandas' one minute.
Calendar-dependent offsets (``"ME"``, ``"B"``, ``"W"``) are refused: their steps vary in length,
so a step count cannot say where the next row falls.

Timestamps travel as ``datetime64[s]`` arrays and every calendar field is computed with integer
arithmetic on them: a request's few hundred stamps cost microseconds, where the same work through
pandas ``DatetimeIndex`` attributes costs milliseconds per request on the serving path.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset
from pandas.tseries.offsets import Day, Tick

from models.errors import ModelInputError

# Legacy model frequencies that are not pandas aliases (or mean something else there).
_LEGACY_STEPS = {"t": pd.Timedelta(minutes=15)}  # ETTm's step; pandas' "t"/"T" was one minute
# Features per step resolution, finest first: a step that is not a whole number of minutes needs
# second_of_minute, one not a whole number of hours minute_of_hour, and so on (Informer2020
# ``time_features_from_frequency_str``: S, T, H and D offsets, in this order of fields).
_DAY_FEATURES = ("day_of_week", "day_of_month", "day_of_year")
_HOUR_FEATURES = ("hour_of_day", *_DAY_FEATURES)
_MINUTE_FEATURES = ("minute_of_hour", *_HOUR_FEATURES)
_SECOND_FEATURES = ("second_of_minute", *_MINUTE_FEATURES)
_DAY_SECONDS = 86_400
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"

Stamps = np.ndarray  # datetime64[s], one dimension or more
_SECONDS = "datetime64[s]"
# 1970-01-01 was a Thursday: day_of_week (Monday = 0) is (days since the epoch + 3) mod 7.
_EPOCH_WEEKDAY = 3
# The data's own shape ("2017-10-24 00:00:00", or with a "T"), parsed by numpy directly; anything
# else (other ISO 8601 forms, time zones, fractions) goes through pandas. Checked on the bytes of
# all stamps at once: the character positions that must hold digits, and those that must hold
# one of the separators.
_CANONICAL_LENGTH = 19
_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
_SEPARATORS = {4: b"-", 7: b"-", 10: b" T", 13: b":", 16: b":"}


def as_stamps(index: pd.DatetimeIndex | Stamps | Sequence[np.datetime64]) -> Stamps:
    """``index`` as a ``datetime64[s]`` array (a pandas index, or an array already)."""
    return np.asarray(index, dtype=_SECONDS)


# Cached: pandas' alias parser costs microseconds, and the serving path asks per request.
@functools.lru_cache(maxsize=64)
def freq_step(freq: str) -> pd.Timedelta:
    """The fixed time between consecutive rows at model frequency ``freq``.

    ``freq`` is a pandas step alias of fixed length (``"15min"``, ``"h"``, ``"2h"``, ``"D"``,
    ``"7D"``) or the legacy ``"t"`` (15 minutes). ``ValueError`` for unknown aliases, for
    calendar-dependent ones (``"ME"``, ``"B"``, ``"W"``), and for steps that are not a positive
    whole number of seconds.
    """
    if freq in _LEGACY_STEPS:
        return _LEGACY_STEPS[freq]
    try:
        offset = to_offset(freq)
    except (ValueError, TypeError) as exc:
        # pandas 3 no longer parses "M", "Q", "Y" (use "ME"...): they are calendar offsets too.
        renamed = re.search(r"Please use '([^']+)'", str(exc))
        if renamed is None:
            guess = re.search(r"Did you mean (\S+)\?", str(exc))
            raise ValueError(
                f"unknown freq {freq!r}"
                + (f" (did you mean {guess.group(1)!r}?)" if guess else "")
                + "; use a fixed pandas step such as '15min', 'h', '2h' or 'D'"
            ) from None
        offset = to_offset(renamed.group(1))
    # Day is a Tick before pandas 3 and its own class after; on naive stamps it is 24 hours.
    if not isinstance(offset, Tick | Day):
        raise ValueError(
            f"freq {freq!r} is calendar-dependent (its steps vary in length); a model needs a "
            "fixed step such as '15min', 'h', 'D' or '7D'"
        )
    step = pd.Timedelta(offset)
    if step <= pd.Timedelta(0) or step % pd.Timedelta(seconds=1):
        raise ValueError(f"freq {freq!r}: the step must be a positive whole number of seconds")
    return step


def step_seconds(freq: str) -> int:
    """Seconds between consecutive rows at ``freq``."""
    return int(freq_step(freq).total_seconds())


def step_freq(step: pd.Timedelta | int) -> str:
    """The canonical alias of a step (a ``Timedelta``, or an integer number of seconds): the
    largest whole unit, e.g. ``"h"`` for one hour, ``"15min"``, ``"90min"``, ``"D"``, ``"7D"``."""
    td = (
        pd.Timedelta(seconds=int(step))
        if isinstance(step, int | np.integer)
        else pd.Timedelta(step)
    )
    if td <= pd.Timedelta(0) or td % pd.Timedelta(seconds=1):
        raise ValueError(f"a step must be a positive whole number of seconds, got {td}")
    seconds = int(td.total_seconds())
    for unit, alias in ((_DAY_SECONDS, "D"), (3600, "h"), (60, "min")):
        if seconds % unit == 0:
            n = seconds // unit
            return alias if n == 1 else f"{n}{alias}"
    return "s" if seconds == 1 else f"{seconds}s"


def feature_names(freq: str) -> tuple[str, ...]:
    """Names of the calendar features :func:`time_features` gives at ``freq``, in order.

    Informer's ``timeF`` convention by the step's finest unit: sub-minute steps add
    ``second_of_minute``; steps that are not whole hours get ``minute_of_hour``, ``hour_of_day``,
    ``day_of_week``, ``day_of_month``, ``day_of_year``; whole hours that are not whole days drop
    the minute; whole days keep ``day_of_week``, ``day_of_month``, ``day_of_year``.
    """
    seconds = step_seconds(freq)
    if seconds % 60:
        return _SECOND_FEATURES
    if seconds % 3600:
        return _MINUTE_FEATURES
    if seconds % _DAY_SECONDS:
        return _HOUR_FEATURES
    return _DAY_FEATURES


def infer_freq(stamps: pd.DatetimeIndex | Stamps) -> str:
    """The canonical alias (see :func:`step_freq`) of the constant step between ``stamps``;
    ``ValueError`` if there are fewer than two, they do not increase, or the steps differ."""
    flat = as_stamps(stamps).ravel()
    if flat.size < 2:
        raise ValueError("need at least two timestamps to infer a frequency")
    diffs = np.diff(flat.astype(np.int64))
    for bad, why in ((diffs <= 0, "timestamps must increase"), (diffs != diffs[0], "steps differ")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            a, b = format_timestamps(flat[i : i + 2])
            raise ValueError(
                f"cannot infer a frequency: {why}; {a} -> {b} (rows {i}, {i + 1}) is "
                f"{pd.Timedelta(seconds=int(diffs[i]))}, the first step is "
                f"{pd.Timedelta(seconds=int(diffs[0]))}"
            )
    return step_freq(int(diffs[0]))


def is_aligned(stamps: pd.DatetimeIndex | Stamps, freq: str) -> np.ndarray:
    """Per stamp, whether it falls on a whole step after midnight. Only steps that divide a day
    have such a grid (``h``: on the hour; ``15min``: :00, :15, :30, :45); longer or uneven steps
    (``7D``, ``7min``) accept any stamp."""
    seconds = as_stamps(stamps).astype(np.int64)
    step = step_seconds(freq)
    if _DAY_SECONDS % step:
        return np.ones(seconds.shape, dtype=bool)
    # The epoch is a midnight, so the remainder since the epoch is the remainder since midnight.
    return np.asarray(seconds % step == 0)


def time_features(index: pd.DatetimeIndex | Stamps, freq: str = "h") -> np.ndarray:
    """Calendar features ``[..., f]`` (float32) in [-0.5, 0.5] for timestamps at ``freq``.

    Accepts a pandas ``DatetimeIndex`` or a ``datetime64`` array of any shape; values equal
    pandas' ``.hour / 23 - 0.5`` etc. exactly.
    """
    names = feature_names(freq)
    seconds = as_stamps(index).astype(np.int64)
    day_number = seconds // _DAY_SECONDS
    calendar = functools.cache(lambda: _calendar_days(day_number))  # both day fields need it
    cols = {
        "second_of_minute": lambda: seconds % 60 / 59.0 - 0.5,
        "minute_of_hour": lambda: (seconds // 60) % 60 / 59.0 - 0.5,
        "hour_of_day": lambda: (seconds // 3600) % 24 / 23.0 - 0.5,
        "day_of_week": lambda: (day_number + _EPOCH_WEEKDAY) % 7 / 6.0 - 0.5,
        "day_of_month": lambda: calendar()[0] / 30.0 - 0.5,
        "day_of_year": lambda: calendar()[1] / 365.0 - 0.5,
    }
    out = np.empty((*seconds.shape, len(names)), dtype=np.float32)
    for k, name in enumerate(names):
        out[..., k] = cols[name]()  # float64 rounded to float32, as astype does
    return out


def _calendar_days(day_number: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 0-based day of the month and of the year of each day since 1970-01-01. numpy's
    month and year casts work out each date on its own, so when the stamps span fewer days than
    there are stamps (a history at a sub-daily step) each day is cast once and looked up."""
    first = int(day_number.min()) if day_number.size else 0
    span = int(day_number.max()) - first + 1 if day_number.size else 0
    if span >= day_number.size:
        return _day_of_month_and_year(day_number)
    day_of_month, day_of_year = _day_of_month_and_year(np.arange(first, first + span))
    at = day_number - first
    return day_of_month[at], day_of_year[at]


def _day_of_month_and_year(day_number: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    days = day_number.astype("datetime64[D]")
    return (
        (days - days.astype("datetime64[M]")).astype(np.int64),
        (days - days.astype("datetime64[Y]")).astype(np.int64),
    )


def parse_timestamps(timestamps: Sequence[str]) -> Stamps:
    """Parse strings into a ``datetime64[s]`` array; ``ValueError`` naming the first bad entry,
    or saying why (time zones, fractions of a second) the stamps cannot be used."""
    text = _canonical_bytes(timestamps)
    if text is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return text.astype(_SECONDS)
        except ValueError:
            pass  # e.g. month 13: pandas below names the entry
    return _parse_with_pandas(timestamps)


def _canonical_bytes(timestamps: Sequence[str]) -> np.ndarray | None:
    """The stamps as a fixed-width bytes array when every one has the canonical shape
    (``YYYY-MM-DD HH:MM:SS``, or a ``T`` between date and time), else None: checked a
    character position at a time over all stamps, not by a regular expression per stamp."""
    try:  # strings of the canonical length, ASCII only (else a TypeError or an encode error)
        if set(map(len, timestamps)) != {_CANONICAL_LENGTH}:
            return None
        raw = "".join(timestamps).encode("ascii")
    except (TypeError, UnicodeEncodeError):
        return None
    chars = np.frombuffer(raw, dtype=np.uint8).reshape(-1, _CANONICAL_LENGTH)
    if ((chars[:, _DIGITS] - ord("0")) > 9).any():  # uint8: below "0" wraps round, above 9
        return None
    for at, allowed in _SEPARATORS.items():
        column = chars[:, at]
        ok = column == allowed[0]
        for other in allowed[1:]:
            ok |= column == other
        if not ok.all():
            return None
    return np.frombuffer(raw, dtype=f"S{_CANONICAL_LENGTH}")


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


def regular_stamps(start: str, n: int, freq: str) -> Stamps:
    """``n`` stamps one ``freq`` step apart from ``start`` (a ``datetime64[s]`` array); the same
    ``ValueError`` as :func:`parse_timestamps` / :func:`check_regular` for a bad or off-grid
    start."""
    first = parse_timestamps([start])
    check_regular(first, freq)
    return first[0] + np.arange(n, dtype=np.int64) * np.timedelta64(step_seconds(freq), "s")


def check_regular(stamps: Stamps, freq: str) -> None:
    """Raise ``ValueError`` unless consecutive stamps are exactly one ``freq`` step apart and, when
    the step divides a day, on that step's grid (hourly: on the hour; see :func:`is_aligned`)."""
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
            f"timestamps must be regular at one step of {freq_step(freq)} (freq '{freq}'); "
            f"{a} -> {b} (rows {i}, {i + 1}) is {pd.Timedelta(seconds=int(diffs[i]))}"
        )
    off_grid = np.flatnonzero(~is_aligned(seconds.astype(_SECONDS), freq))
    if off_grid.size:
        i = int(off_grid[0])
        if step == 3600:
            raise ValueError("hourly timestamps must fall on the hour (minutes and seconds zero)")
        raise ValueError(
            f"timestamps at freq '{freq}' must fall on whole steps of {freq_step(freq)} after "
            f"midnight; {format_timestamps(seconds[i : i + 1].astype(_SECONDS))[0]} (row {i}) "
            "does not"
        )


# The last second a ``YYYY-MM-DD HH:MM:SS`` timestamp can write (and pandas and the request
# schema read): a forecast whose timestamps would pass it has no timestamps to answer with.
LAST_STAMP = np.datetime64("9999-12-31T23:59:59", "s")


def check_future_fits(last: np.datetime64 | None, steps: int, step_s: int | None) -> None:
    """Raise ``ModelInputError`` when ``steps`` stamps of ``step_s`` seconds after ``last`` run
    past :data:`LAST_STAMP` (the message names the history's end and the horizon that fits);
    nothing to check without a clock (``last`` or ``step_s`` None)."""
    if last is None or step_s is None:
        return
    room = int((LAST_STAMP - as_stamps(last)).astype(np.int64)) // step_s
    if steps <= room:
        return
    (end,) = format_timestamps(as_stamps(last))
    fits = (
        f"a horizon of at most {room} or an earlier history"
        if room > 0
        else "an earlier history (no horizon fits after this one)"
    )
    raise ModelInputError(
        f"the history ends at {end}, so the forecast's {steps} timestamps would run past "
        f"9999-12-31 23:59:59, the largest date a timestamp can hold; send {fits}"
    )


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
