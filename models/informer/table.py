"""Any user's time-series CSV: read and check it, choose split borders, scale the splits.

The layer between a file and training. :func:`load_series_csv` reads a CSV with a date column
and numeric value columns into a :class:`SeriesTable`, refusing anything the model cannot train
on with a :class:`DataError` that names the line (as an editor numbers it: the header is line
1), the column, the offending text and how to fix it; no row is ever dropped or filled silently.
:func:`split_borders` chooses train / val / test row ranges (ratios, explicit borders or a named
preset) and refuses splits too small to hold one window; :func:`make_splits` scales them.

Conventions follow the long-horizon forecasting literature: ratios 0.7 / 0.1 / 0.2 for custom
data (Autoformer / DLinear ``Dataset_Custom``), the ETT 12/4/4-month split for ``ett-hour`` and
``ett-minute`` (Informer2020 ``Dataset_ETT_hour`` / ``Dataset_ETT_minute``, ``data/ETT/README.md``),
val and test arrays starting ``seq_len`` rows before their border so the first window can look
back, and a standard scaler fit on the training rows only.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from models.informer.data import SplitArrays, StandardScaler
from models.informer.timefeatures import (
    format_timestamps,
    freq_step,
    is_aligned,
    step_freq,
    time_features,
)

SPLITS = ("train", "val", "test")
DEFAULT_RATIOS = (0.7, 0.1, 0.2)
_MONTH_HOURS = 30 * 24  # the ETT protocol counts a month as 30 days
# Named split presets: (start, train_end, val_end, test_end) rows.
SPLIT_PRESETS: dict[str, tuple[int, int, int, int]] = {
    "ett-hour": (0, 12 * _MONTH_HOURS, 16 * _MONTH_HOURS, 20 * _MONTH_HOURS),
    "ett-minute": (0, 4 * 12 * _MONTH_HOURS, 4 * 16 * _MONTH_HOURS, 4 * 20 * _MONTH_HOURS),
}
_HEADER_LINE = 1  # data row i sits on line i + 2
# A UTC offset or "Z" after a time of day (a bare date's "-01" is not one).
_TZ_SUFFIX = re.compile(r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:Z|[+-]\d\d(?::?\d\d)?)$", re.I)
_MISSING_WORDS = {"nan", "na", "n/a", "null", "none", "-", "?"}


class DataError(ValueError):
    """A CSV or split the model cannot use; the message names the line and/or column and says
    how to fix it."""


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


# ---------------------------------------------------------------------------------- reading


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
    frame = _read(path)
    header = [str(name).strip() for name in frame.iloc[0]]
    rows = frame.iloc[1:].reset_index(drop=True)
    rows.columns = pd.RangeIndex(len(header))
    date_at, value_at = _choose_columns(path, header, date_column, columns)
    rows = _drop_trailing_blank_lines(rows)
    _check_line_shapes(path, rows, header)
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


def _line(row: int) -> int:
    """The editor line number of data row ``row`` (0-based, header excluded)."""
    return row + _HEADER_LINE + 1


def _read(path: Path) -> pd.DataFrame:
    """Every cell as text, header included as row 0, nothing converted, no line skipped."""
    if not path.exists():
        raise DataError(f"{path}: no such file; check the path")
    if not path.is_file():
        raise DataError(f"{path}: not a file; give the path of a CSV file")
    try:
        frame = pd.read_csv(
            path,
            header=None,
            dtype=str,
            keep_default_na=False,  # "NA", "nan", "" stay text, so the message can quote them
            skip_blank_lines=False,  # keeps line numbers exact; blank lines are refused below
            index_col=False,
            encoding="utf-8-sig",  # tolerate a byte-order mark before the header
        )
    except pd.errors.EmptyDataError:
        raise DataError(
            f"{path}: the file is empty; it needs a header line and data rows"
        ) from None
    except pd.errors.ParserError as exc:
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if found:
            want, line, got = found.groups()
            raise DataError(
                f"{path}: line {line} has {got} fields but the header has {want}; every line "
                "needs one value per column (check for extra commas or a different separator)"
            ) from None
        raise DataError(f"{path}: not a readable CSV: {exc}") from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8 CSV"
        ) from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    if frame.empty:
        raise DataError(f"{path}: the file is empty; it needs a header line and data rows")
    return frame


def _choose_columns(
    path: Path, header: list[str], date_column: str, columns: Sequence[str] | None
) -> tuple[int, list[int]]:
    """Positions of the date column and the value columns, after checking the header."""
    seen: dict[str, int] = {}
    for j, name in enumerate(header):
        if name and name in seen:
            raise DataError(
                f"{path}: column name {name!r} appears twice in the header (columns "
                f"{seen[name] + 1} and {j + 1}); rename one"
            )
        seen[name] = j
    available = ", ".join(repr(n) for n in header)
    if date_column not in seen:
        raise DataError(
            f"{path}: no date column {date_column!r}; the header has {available}; pass "
            "--date-column with the name of the timestamp column"
        )
    date_at = seen[date_column]
    if columns is None:
        value_at = [j for j in range(len(header)) if j != date_at]
        for j in value_at:
            if not header[j]:
                raise DataError(
                    f"{path}: column {j + 1} has no name in the header (often a saved row "
                    "index); name or delete it, or choose value columns with --columns"
                )
    else:
        if isinstance(columns, str):
            columns = [columns]
        if not columns:
            raise DataError(f"{path}: no value columns chosen; name at least one with --columns")
        value_at = []
        for name in columns:
            if name not in seen:
                raise DataError(
                    f"{path}: no column {name!r}; the header has {available}; fix --columns"
                )
            if name == date_column:
                raise DataError(
                    f"{path}: {name!r} is the date column and cannot also be a value column; "
                    "remove it from --columns"
                )
            if seen[name] in value_at:
                raise DataError(f"{path}: column {name!r} is chosen twice in --columns")
            value_at.append(seen[name])
    if not value_at:
        raise DataError(
            f"{path}: no value columns besides the date column {date_column!r}; the file needs "
            "at least one numeric column"
        )
    return date_at, value_at


def _drop_trailing_blank_lines(rows: pd.DataFrame) -> pd.DataFrame:
    blank = _blank_rows(rows)
    end = len(rows)
    while end and blank[end - 1]:
        end -= 1
    return rows.iloc[:end]


def _blank_rows(rows: pd.DataFrame) -> np.ndarray:
    if rows.empty:
        return np.zeros(0, dtype=bool)
    return np.asarray((rows.apply(lambda col: col.str.strip()) == "").all(axis=1))


def _check_line_shapes(path: Path, rows: pd.DataFrame, header: list[str]) -> None:
    """Refuse blank lines inside the data and cells holding line breaks (either would make the
    line numbers of later messages wrong, and neither can be a reading)."""
    blank = np.flatnonzero(_blank_rows(rows))
    if blank.size:
        raise DataError(
            f"{path}: line {_line(int(blank[0]))} is blank; delete it (only blank lines at the "
            "end of the file are ignored)"
        )
    for j, name in enumerate(header):
        broken = np.flatnonzero(rows[j].str.contains(r"[\r\n]", regex=True).to_numpy(bool))
        if broken.size:
            raise DataError(
                f"{path}: line {_line(int(broken[0]))}, column {name!r}: a quoted cell spans "
                "several lines; dates and numbers cannot contain line breaks"
            )


def _parse_dates(path: Path, text: pd.Series, name: str) -> np.ndarray:
    """``datetime64[s]`` stamps, or a :class:`DataError` on the first unusable cell."""
    cells = text.str.strip()
    empty = np.flatnonzero((cells == "").to_numpy(bool))
    if empty.size:
        raise DataError(
            f"{path}: line {_line(int(empty[0]))}, column {name!r}: the date is empty; every "
            "row needs a timestamp"
        )
    zoned = np.flatnonzero(cells.str.contains(_TZ_SUFFIX).to_numpy(bool))
    if zoned.size:
        i = int(zoned[0])
        raise DataError(
            f"{path}: line {_line(i)}, column {name!r}: {cells.iloc[i]!r} carries a time zone; "
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
            f"{path}: line {_line(i)}, column {name!r}: {cells.iloc[i]!r} is not a date-time; "
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
            f"{path}: line {_line(i)}, column {name!r}: {cells.iloc[i]!r} has a fraction of a "
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
        f"{path}: line {_line(r)}, column {header[value_at[c]]!r}: the value {why}{others}; "
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
            f"{path}: lines {_line(first)} and {_line(later)} have the same timestamp "
            f"{_show(stamps[later])}; each timestamp must appear once (remove or merge one)"
        )
    diffs = np.diff(seconds)
    back = np.flatnonzero(diffs < 0)
    if back.size:
        i = int(back[0])
        raise DataError(
            f"{path}: timestamps are not in order: line {_line(i + 1)} "
            f"({_show(stamps[i + 1])}) comes after line {_line(i)} ({_show(stamps[i])}); "
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
            f"{path}: line {_line(i)} ({_show(stamps[i])}) to line {_line(i + 1)} "
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
            f"{path}: line {_line(i)}: {_show(stamps[i])} is not on the {step_freq(expected)} grid "
            f"(whole steps after midnight, e.g. on the hour for hourly data), which serving "
            "requires; round or shift the timestamps"
        )
    return resolved


def _show(stamp: np.datetime64) -> str:
    return format_timestamps(np.asarray([stamp]))[0]


# ---------------------------------------------------------------------------------- splitting


def split_borders(
    n_rows: int,
    context: int,
    horizon: int,
    *,
    ratios: Sequence[float] | None = None,
    borders: Sequence[int] | None = None,
    preset: str | None = None,
) -> dict[str, tuple[int, int]]:
    """Train / val / test row ranges ``[start, end)`` over a table of ``n_rows`` rows.

    Give at most one of:
        ratios: three positive fractions summing to at most 1 (default 0.7 / 0.1 / 0.2). Train
            gets ``int(n * r0)`` rows from row 0, test ``int(n * r2)``; when they sum to 1, val
            takes the rest (Autoformer / DLinear ``Dataset_Custom``), else ``int(n * r1)`` and
            the rows after test are unused.
        borders: row indices ``(train_end, val_end, test_end)``, train starting at row 0, or
            ``(start, train_end, val_end, test_end)``.
        preset: a name in :data:`SPLIT_PRESETS`: ``ett-hour`` (train ``[0, 8640)``, val
            ``[8640, 11520)``, test ``[11520, 14400)``) or ``ett-minute`` (the same ×4).

    Each split must hold at least one window: train ``context + horizon`` rows, val and test
    ``horizon`` rows each (their windows look back ``context`` rows into the split before).
    Anything else raises :class:`DataError` saying how many rows are needed.
    """
    if context < 1 or horizon < 1:
        raise DataError(f"context ({context}) and horizon ({horizon}) must be at least 1")
    if sum(x is not None for x in (ratios, borders, preset)) > 1:
        raise DataError("choose the split one way: ratios, borders or a preset, not several")
    if preset is None and borders is None:
        ratios = DEFAULT_RATIOS if ratios is None else tuple(ratios)
        _check_ratios(ratios)
        cuts = _ratio_cuts(n_rows, ratios)
        short = _shortfall(cuts, context, horizon)
        if short:
            raise DataError(
                f"{n_rows} rows are too few for a {'/'.join(f'{r:g}' for r in ratios)} split "
                f"with context {context} and horizon {horizon}: {short}; these ratios need at "
                f"least {_rows_needed(ratios, context, horizon)} rows. Use a longer series, a "
                "shorter --context or --horizon, or other --split-ratios"
            )
    else:
        if preset is not None:
            if preset not in SPLIT_PRESETS:
                raise DataError(
                    f"unknown split preset {preset!r}; known: {', '.join(SPLIT_PRESETS)}"
                )
            cuts = SPLIT_PRESETS[preset]
            if cuts[-1] > n_rows:
                raise DataError(
                    f"split preset {preset!r} needs {cuts[-1]} rows (its test split ends at row "
                    f"{cuts[-1]}) but the file has {n_rows}; use --split-ratios or "
                    "--split-borders instead"
                )
            how = f"split preset {preset!r}"
        else:
            assert borders is not None
            cuts = _check_borders(n_rows, borders)
            how = f"split borders {list(cuts)}"
        short = _shortfall(cuts, context, horizon)
        if short:
            raise DataError(
                f"{how} is too small for context {context} and horizon {horizon}: {short}; "
                "move the borders, or use a shorter --context or --horizon"
            )
    start, train_end, val_end, test_end = cuts
    return {"train": (start, train_end), "val": (train_end, val_end), "test": (val_end, test_end)}


def _check_borders(n_rows: int, borders: Sequence[int]) -> tuple[int, int, int, int]:
    if len(borders) not in (3, 4):
        raise DataError(
            f"split borders need 3 numbers (train_end val_end test_end) or 4 (start train_end "
            f"val_end test_end), got {len(borders)}"
        )
    if any(not isinstance(b, int | np.integer) or isinstance(b, bool) for b in borders):
        raise DataError(f"split borders must be whole row numbers, got {list(borders)}")
    cuts = tuple(int(b) for b in borders)
    start, train_end, val_end, test_end = cuts if len(cuts) == 4 else (0, *cuts)
    if start < 0 or test_end > n_rows:
        raise DataError(
            f"split borders {list(cuts)} fall outside the file's rows [0, {n_rows}]; the last "
            f"border may be at most {n_rows}"
        )
    if not start < train_end < val_end < test_end:
        raise DataError(
            f"split borders {list(cuts)} must increase strictly (start < train_end < val_end < "
            "test_end)"
        )
    return start, train_end, val_end, test_end


def _check_ratios(ratios: Sequence[float]) -> None:
    if len(ratios) != 3:
        raise DataError(f"split ratios need 3 numbers (train val test), got {len(ratios)}")
    if not all(math.isfinite(r) and r > 0 for r in ratios):
        raise DataError(f"split ratios must be positive, got {list(ratios)}")
    total = math.fsum(ratios)
    if total > 1 and not math.isclose(total, 1.0):
        raise DataError(f"split ratios {list(ratios)} sum to {total:g}; they must sum to at most 1")


def _ratio_cuts(n_rows: int, ratios: Sequence[float]) -> tuple[int, int, int, int]:
    r_train, r_val, r_test = ratios
    train, test = int(n_rows * r_train), int(n_rows * r_test)
    if math.isclose(math.fsum(ratios), 1.0):
        return 0, train, n_rows - test, n_rows
    val = int(n_rows * r_val)
    return 0, train, train + val, train + val + test


def _shortfall(cuts: tuple[int, int, int, int], context: int, horizon: int) -> str:
    """Why the split holds no window (empty when every split holds one)."""
    start, train_end, val_end, test_end = cuts
    sizes = {"train": train_end - start, "val": val_end - train_end, "test": test_end - val_end}
    needs = {"train": context + horizon, "val": horizon, "test": horizon}
    short = [
        f"{name} gets {sizes[name]} rows but needs at least {needs[name]}"
        + (" (context + horizon)" if name == "train" else " (horizon)")
        for name in SPLITS
        if sizes[name] < needs[name]
    ]
    return "; ".join(short)


def _rows_needed(ratios: Sequence[float], context: int, horizon: int) -> int:
    """The fewest rows for which ``ratios`` give every split a window (fewer never do)."""
    r_train, r_val, r_test = ratios
    # Bounds no smaller count can beat; val may take the rounding remainder (up to 2 rows more
    # than n * r_val), hence its slack. The scan then finds the exact minimum past int() rounding.
    n = max(
        math.ceil((context + horizon) / r_train),
        math.ceil(horizon / r_test),
        math.ceil(max(horizon - 2, 0) / r_val),
        3,
    )
    n = max(n - 1, 3)
    while _shortfall(_ratio_cuts(n, ratios), context, horizon):
        n += 1
    return n


# ---------------------------------------------------------------------------------- scaling


def make_splits(
    table: SeriesTable, borders: Mapping[str, tuple[int, int]], seq_len: int
) -> tuple[dict[str, SplitArrays], StandardScaler]:
    """The three splits, scaled by a scaler fit on the train rows only, and that scaler.

    ``borders`` as :func:`split_borders` returns them. Val and test start ``seq_len`` rows
    before their border so their first window can look back, exactly as
    :func:`models.informer.data.make_splits` does for ETTh1.
    """
    missing = [name for name in SPLITS if name not in borders]
    if missing:
        raise DataError(f"split borders lack {', '.join(missing)}")
    lo, hi = borders["train"]
    if borders["val"][0] - seq_len < 0 or borders["test"][0] - seq_len < 0:
        raise DataError(
            f"val and test must start at least seq_len ({seq_len}) rows into the table to look "
            f"back; they start at rows {borders['val'][0]} and {borders['test'][0]}"
        )
    if max(end for _, end in borders.values()) > len(table):
        raise DataError(f"split borders {dict(borders)} exceed the table's {len(table)} rows")
    scaler = StandardScaler.fit(table.values[lo:hi])
    scaled = scaler.transform(table.values).astype(np.float32)
    marks = time_features(table.stamps, table.freq)
    index = table.index
    splits = {}
    for name in SPLITS:
        start, end = borders[name]
        begin = start if name == "train" else start - seq_len
        splits[name] = SplitArrays(scaled[begin:end], marks[begin:end], index[begin:end])
    return splits, scaler
