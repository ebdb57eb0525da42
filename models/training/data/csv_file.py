"""A CSV file as text: read every cell unconverted, check the header and the shape of the lines.

The first step of :func:`models.training.data.table.load_series_csv`. Nothing is converted or dropped
here, so a :class:`DataError` can quote the offending text and name its line as an editor
numbers it (the header is line 1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

_HEADER_LINE = 1  # data row i sits on line i + 2


class DataError(ValueError):
    """A CSV or split the model cannot use; the message names the line and/or column and says
    how to fix it."""


def line_number(row: int) -> int:
    """The editor line number of data row ``row`` (0-based, header excluded)."""
    return row + _HEADER_LINE + 1


def read_cells(path: Path) -> pd.DataFrame:
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


def choose_columns(
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


def drop_trailing_blank_lines(rows: pd.DataFrame) -> pd.DataFrame:
    blank = _blank_rows(rows)
    end = len(rows)
    while end and blank[end - 1]:
        end -= 1
    return rows.iloc[:end]


def _blank_rows(rows: pd.DataFrame) -> np.ndarray:
    if rows.empty:
        return np.zeros(0, dtype=bool)
    return np.asarray((rows.apply(lambda col: col.str.strip()) == "").all(axis=1))


def check_line_shapes(path: Path, rows: pd.DataFrame, header: list[str]) -> None:
    """Refuse blank lines inside the data and cells holding line breaks (either would make the
    line numbers of later messages wrong, and neither can be a reading)."""
    blank = np.flatnonzero(_blank_rows(rows))
    if blank.size:
        raise DataError(
            f"{path}: line {line_number(int(blank[0]))} is blank; delete it (only blank lines at the "
            "end of the file are ignored)"
        )
    for j, name in enumerate(header):
        broken = np.flatnonzero(rows[j].str.contains(r"[\r\n]", regex=True).to_numpy(bool))
        if broken.size:
            raise DataError(
                f"{path}: line {line_number(int(broken[0]))}, column {name!r}: a quoted cell spans "
                "several lines; dates and numbers cannot contain line breaks"
            )
