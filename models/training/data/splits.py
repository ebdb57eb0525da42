"""Train / validation / test splits of a :class:`~models.training.data.table.SeriesTable`: choose the
row borders (ratios, explicit borders or a named preset), refuse splits too small to hold one
window, scale the splits with a scaler fit on the training rows only.

Conventions follow the long-horizon forecasting literature: ratios 0.7 / 0.1 / 0.2 for custom
data (Autoformer / DLinear ``Dataset_Custom``), the ETT 12/4/4-month split for ``ett-hour`` and
``ett-minute`` (Informer2020 ``Dataset_ETT_hour`` / ``Dataset_ETT_minute``, ``data/ETT/README.md``),
val and test arrays starting ``seq_len`` rows before their border so the first window can look
back, and a standard scaler fit on the training rows only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from models.informer.scaler import StandardScaler
from models.informer.timefeatures import time_features
from models.training.data.csv_file import DataError
from models.training.data.ett import SplitArrays
from models.training.data.table import SeriesTable

SPLITS = ("train", "val", "test")
DEFAULT_RATIOS = (0.7, 0.1, 0.2)
_MONTH_HOURS = 30 * 24  # the ETT protocol counts a month as 30 days
# Named split presets: (start, train_end, val_end, test_end) rows.
SPLIT_PRESETS: dict[str, tuple[int, int, int, int]] = {
    "ett-hour": (0, 12 * _MONTH_HOURS, 16 * _MONTH_HOURS, 20 * _MONTH_HOURS),
    "ett-minute": (0, 4 * 12 * _MONTH_HOURS, 4 * 16 * _MONTH_HOURS, 4 * 20 * _MONTH_HOURS),
}


# ---------------------------------------------------------------------------------- borders


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
    :func:`models.training.data.ett.make_splits` does for ETTh1.
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
