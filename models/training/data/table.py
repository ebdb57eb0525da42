"""Any user's time-series CSV, read and checked into a :class:`SeriesTable`.

The layer between a file and training. :func:`load_series_csv` reads a CSV with a date column
and numeric value columns, refusing anything the model cannot train on with a
:class:`~models.training.data.csv_file.DataError` that names the line (as an editor numbers it: the
header is line 1), the column, the offending text and how to fix it; no row is ever dropped or
filled silently. The file's text and header are checked in :mod:`models.training.data.csv_file`;
the dates, values and steps here. Choosing and scaling the splits: :mod:`models.training.data.splits`.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from models.informer.timefeatures import format_timestamps, freq_step, is_aligned, step_freq
from models.training.data.csv_file import (
    DataError,
    check_line_shapes,
    choose_columns,
    drop_trailing_blank_lines,
    line_number,
    read_cells,
)

# A UTC offset or "Z" after a time of day (a bare date's "-01" is not one).
_TZ_SUFFIX = re.compile(r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:Z|[+-]\d\d(?::?\d\d)?)$", re.I)
_MISSING_WORDS = {"nan", "na", "n/a", "null", "none", "-", "?"}


@dataclass
class SeriesTable:
    """A checked, regular multivariate series.

    Attributes:
        path: the CSV it was read from.
        stamps: row timestamps ``[rows]`` (``datetime64[s]``), strictly increasing by one step.
        values: ``[rows, channels]`` (float64), every cell finite.
        channels: value column names, in the order of ``values``' columns.
        freq: the step as a model frequency (the one given, else the inferred canonical alias,
            e.g. ``"h"``, ``"15min"``, ``"D"``).
        date_column: the timestamp column's name.
    """

    path: Path
    stamps: np.ndarray
    values: np.ndarray
    channels: list[str]
    freq: str
    date_column: str

    def __len__(self) -> int:
        return len(self.stamps)

    @property
    def index(self) -> pd.DatetimeIndex:
        """The timestamps as a pandas index."""
        return pd.DatetimeIndex(self.stamps)


def load_series_csv(
    path: str | Path,
    date_column: str = "date",
    columns: Sequence[str] | None = None,
    freq: str | None = None,
) -> SeriesTable:
    """Read ``path`` into a :class:`SeriesTable`, or raise :class:`DataError` saying what to fix.

    Args:
        path: a comma-separated file with a header line.
        date_column: the timestamp column (ISO 8601 such as ``2016-07-01 00:00:00`` preferred;
            any single format pandas can infer is accepted; no time zones, whole seconds).
        columns: value columns, in this order; default every column except ``date_column``.
        freq: the expected step (``"h"``, ``"15min"``, ``"D"``...); default inferred from the
            rows. Either way every step must be the same, with no gaps.

    Header names are stripped of surrounding spaces; blank lines at the end of the file are
    ignored, a blank line anywhere else is an error. Line numbers in messages assume no quoted
    cell spans lines (such a cell is itself refused).
    """
    path = Path(path)
    frame = read_cells(path)
    header = [str(name).strip() for name in frame.iloc[0]]
    rows = frame.iloc[1:].reset_index(drop=True)
    rows.columns = pd.RangeIndex(len(header))
    date_at, value_at = choose_columns(path, header, date_column, columns)
    rows = drop_trailing_blank_lines(rows)
    check_line_shapes(path, rows, header)
    if len(rows) < 2:
        raise DataError(
            f"{path}: {len(rows)} data row(s); a series needs at least 2 rows (and a split many "
            "more: the training part alone needs context + horizon rows)"
        )
    stamps = _parse_dates(path, rows[date_at], header[date_at])
    values = _parse_values(path, rows, value_at, header)
    resolved = _check_steps(path, stamps, freq)
    return SeriesTable(
        path=path,
        stamps=stamps,
        values=values,
        channels=[header[j] for j in value_at],
        freq=resolved,
        date_column=header[date_at],
    )


def _parse_dates(path: Path, text: pd.Series, name: str) -> np.ndarray:
    """``datetime64[s]`` stamps, or a :class:`DataError` on the first unusable cell."""
    cells = text.str.strip()
    empty = np.flatnonzero((cells == "").to_numpy(bool))
    if empty.size:
        raise DataError(
            f"{path}: line {line_number(int(empty[0]))}, column {name!r}: the date is empty; every "
            "row needs a timestamp"
        )
    zoned = np.flatnonzero(cells.str.contains(_TZ_SUFFIX).to_numpy(bool))
    if zoned.size:
        i = int(zoned[0])
        raise DataError(
            f"{path}: line {line_number(i)}, column {name!r}: {cells.iloc[i]!r} carries a time zone; "
            "write naive local times (no offset, no 'Z'), as the model's calendar is local"
        )
    # ISO 8601 first; else the one format pandas infers from the first cell (e.g. 07/01/2016
    # 00:00). Whichever parses further is the file's format, and its first failure is reported.
    attempts = []
    for fmt in ("ISO8601", None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "could not infer format": a failure shows as NaT
            try:
                parsed = pd.to_datetime(cells, format=fmt, errors="coerce")
            except (ValueError, TypeError):
                continue
        bad = np.flatnonzero(parsed.isna().to_numpy(bool))
        if not bad.size:
            break
        attempts.append(int(bad[0]))
    else:
        i = max(attempts) if attempts else 0
        raise DataError(
            f"{path}: line {line_number(i)}, column {name!r}: {cells.iloc[i]!r} is not a date-time; "
            "use one format throughout, preferably ISO 8601 like '2016-07-01 00:00:00'"
        )
    index = pd.DatetimeIndex(parsed)
    if index.tz is not None:  # an offset the pattern above did not catch
        raise DataError(
            f"{path}: column {name!r} carries time zones; write naive local times (no offset)"
        )
    fractional = np.flatnonzero(index != index.floor("s"))
    if fractional.size:
        i = int(fractional[0])
        raise DataError(
            f"{path}: line {line_number(i)}, column {name!r}: {cells.iloc[i]!r} has a fraction of a "
            "second; timestamps must be whole seconds"
        )
    return np.asarray(index.as_unit("s").to_numpy(), dtype="datetime64[s]")


def _parse_values(
    path: Path, rows: pd.DataFrame, value_at: list[int], header: list[str]
) -> np.ndarray:
    """``[rows, channels]`` float64, or a :class:`DataError` on the first (top-most, then
    left-most) cell that is not a finite number."""
    # Channel-major memory, as pandas' own float block: the scaler's sums then match ETTh1's
    # reference loader (``data.load_etth1``) to the last bit.
    parsed = np.stack(
        [pd.to_numeric(rows[j], errors="coerce").to_numpy(np.float64) for j in value_at]
    ).T
    bad = ~np.isfinite(parsed)
    if not bad.any():
        return parsed
    r, c = (int(k) for k in np.argwhere(bad)[0])
    cell = str(rows[value_at[c]].iloc[r]).strip()
    if not cell:
        why = "is empty (or the line has fewer fields than the header)"
    elif cell.lower() in _MISSING_WORDS:
        why = f"is {cell!r}, a missing value"
    elif math.isnan(parsed[r, c]):
        why = f"{cell!r} is not a number"
    else:
        why = f"{cell!r} is not a finite number"
    more = int(bad.sum()) - 1
    others = f" ({more} more such cell{'s' if more > 1 else ''} in the file)" if more else ""
    raise DataError(
        f"{path}: line {line_number(r)}, column {header[value_at[c]]!r}: the value {why}{others}; "
        "every value must be a finite number (fill missing readings, e.g. by interpolation, or "
        "leave the column out with --columns)"
    )


def _check_steps(path: Path, stamps: np.ndarray, freq: str | None) -> str:
    """Refuse duplicate, unsorted, irregular and off-grid stamps; the model frequency."""
    seconds = stamps.astype(np.int64)
    index = pd.Index(seconds)
    dup = np.flatnonzero(index.duplicated())
    if dup.size:
        later = int(dup[0])
        first = int(np.flatnonzero(seconds == seconds[later])[0])
        raise DataError(
            f"{path}: lines {line_number(first)} and {line_number(later)} have the same timestamp "
            f"{_show(stamps[later])}; each timestamp must appear once (remove or merge one)"
        )
    diffs = np.diff(seconds)
    back = np.flatnonzero(diffs < 0)
    if back.size:
        i = int(back[0])
        raise DataError(
            f"{path}: timestamps are not in order: line {line_number(i + 1)} "
            f"({_show(stamps[i + 1])}) comes after line {line_number(i)} ({_show(stamps[i])}); "
            "sort the rows by time"
        )
    if freq is None:
        values, counts = np.unique(diffs, return_counts=True)
        expected = int(values[np.argmax(counts)])  # the most common step; ties: the smallest
        label = f"the file's usual step {step_freq(expected)}"
    else:
        try:
            expected = int(freq_step(freq).total_seconds())
        except ValueError as exc:
            raise DataError(f"{exc} (--freq)") from None
        label = f"one step of freq {freq!r}"
    off = np.flatnonzero(diffs != expected)
    if off.size:
        i = int(off[0])
        if freq is not None and off.size == diffs.size and (diffs == diffs[0]).all():
            raise DataError(
                f"{path}: the rows step {step_freq(int(diffs[0]))} but freq {freq!r} "
                f"({step_freq(expected)}) was given; pass --freq {step_freq(int(diffs[0]))} or "
                "leave --freq out to infer it"
            )
        monthly = bool(((diffs >= 28 * 86_400) & (diffs <= 31 * 86_400)).all())
        hint = (
            "calendar months vary in length; a model needs a fixed step"
            if monthly
            else "fill the missing rows (e.g. resample and interpolate) or cut the file there"
        )
        raise DataError(
            f"{path}: line {line_number(i)} ({_show(stamps[i])}) to line {line_number(i + 1)} "
            f"({_show(stamps[i + 1])}) is a step of {step_freq(int(diffs[i]))}, expected "
            f"{label} ({step_freq(expected)}); {off.size} irregular step"
            f"{'s' if off.size > 1 else ''} in all. Rows must be evenly spaced with no gaps: "
            f"{hint}"
        )
    resolved = freq if freq is not None else step_freq(expected)
    off_grid = np.flatnonzero(~is_aligned(stamps, resolved))
    if off_grid.size:
        i = int(off_grid[0])
        raise DataError(
            f"{path}: line {line_number(i)}: {_show(stamps[i])} is not on the {step_freq(expected)} grid "
            f"(whole steps after midnight, e.g. on the hour for hourly data), which serving "
            "requires; round or shift the timestamps"
        )
    return resolved


def _show(stamp: np.datetime64) -> str:
    return format_timestamps(np.asarray([stamp]))[0]
