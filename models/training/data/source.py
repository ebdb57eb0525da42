"""Where a checkpoint's data came from, recorded in its ``config.json`` so evaluation (and a
user re-checking a model) rebuilds exactly the same splits and scaler.

A source is a CSV plus how it was read (date column, value columns, frequency) and the row
borders of the train / validation / test splits. Paths inside the repository are stored
relative to it, so a checkpoint trained here evaluates on any clone.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from models.informer.scaler import StandardScaler
from models.training.data.ett import ETTH1_CHANNELS, REPO_ROOT, SPLIT_BORDERS, SplitArrays, data_dir
from models.training.data.splits import SPLIT_PRESETS, make_splits, split_borders
from models.training.data.table import SeriesTable, load_series_csv

SPLITS = ("train", "val", "test")
_M = SPLIT_PRESETS["ett-minute"]
ETTM1_BORDERS = {"train": (_M[0], _M[1]), "val": (_M[1], _M[2]), "test": (_M[2], _M[3])}


@dataclass(frozen=True)
class DataSource:
    """A CSV, how to read it and its split borders (rows ``[start, end)`` per split)."""

    path: str
    date_column: str
    columns: tuple[str, ...]
    freq: str
    borders: dict[str, tuple[int, int]]
    split: str  # how the borders were chosen, e.g. "preset ett-hour" or "ratios 0.7/0.1/0.2"

    def resolved_path(self) -> Path:
        """The CSV on this machine: absolute as recorded, else under the repository, else under
        ``$ATTNSERVE_DATA_DIR`` (shipped data recorded as ``data/ETT/...``)."""
        path = Path(self.path)
        if path.is_absolute():
            return path
        in_repo = REPO_ROOT / path
        if in_repo.is_file() or path.parts[:1] != ("data",):
            return in_repo
        return data_dir().joinpath(*path.parts[1:])

    def load(self, seq_len: int) -> tuple[SeriesTable, dict[str, SplitArrays], StandardScaler]:
        """The table, its scaled splits (val/test with ``seq_len`` rows of look-back) and the
        train-split scaler."""
        table = load_series_csv(
            self.resolved_path(), self.date_column, list(self.columns), self.freq
        )
        splits, scaler = make_splits(table, self.borders, seq_len)
        return table, splits, scaler

    def describe(self) -> str:
        """A ``quality.json``'s ``dataset``: the file, its test rows and how they were chosen,
        and how many channels."""
        test = list(self.borders["test"])
        return f"{self.path}, test rows {test} ({self.split}), {len(self.columns)} channels"

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["columns"] = list(self.columns)
        record["borders"] = {k: list(v) for k, v in self.borders.items()}
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> DataSource:
        return cls(
            path=record["path"],
            date_column=record["date_column"],
            columns=tuple(record["columns"]),
            freq=record["freq"],
            borders={k: (int(v[0]), int(v[1])) for k, v in record["borders"].items()},
            split=record.get("split", ""),
        )


def portable_path(path: Path) -> str:
    """``path`` relative to the repository when inside it (shipped data), else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(REPO_ROOT))
    except ValueError:
        return str(resolved)


# The data every shipped checkpoint without a ``data`` record was trained on.
ETTH1_SOURCE = DataSource(
    path="data/ETT/ETTh1.csv",
    date_column="date",
    columns=ETTH1_CHANNELS,
    freq="h",
    borders=dict(SPLIT_BORDERS),
    split="preset ett-hour",
)


def is_etth1_protocol(source: DataSource) -> bool:
    """Whether ``source`` is ETTh1 under the paper's split (so the paper's figures compare)."""
    same = (ETTH1_SOURCE.path, ETTH1_SOURCE.columns, ETTH1_SOURCE.borders)
    return (source.path, source.columns, source.borders) == same


def is_ettm1_protocol(source: DataSource) -> bool:
    """Whether ``source`` is the shipped ETTm1 (all seven channels) under the paper's split."""
    return (
        Path(source.path).name == "ETTm1.csv"
        and source.columns == ETTH1_SOURCE.columns
        and source.borders == ETTM1_BORDERS
    )


def source_of(meta: dict[str, Any]) -> DataSource:
    """A checkpoint's data source (ETTh1 for checkpoints that predate the record)."""
    record = meta.get("data")
    return DataSource.from_dict(record) if record else ETTH1_SOURCE


def add_data_arguments(
    parser: argparse.ArgumentParser, title: str = "data", data_help: str = "CSV file"
) -> None:
    """The flags that name a CSV, how to read it and how to split it (``attnserve train``,
    ``attnserve evaluate`` of a transformers folder, the PatchTST trainer)."""
    data = parser.add_argument_group(title)
    data.add_argument("--data", type=Path, default=None, help=data_help)
    data.add_argument("--date-column", default="date", help="timestamp column (default: date)")
    data.add_argument("--columns", nargs="+", default=None, help="value columns (default: all)")
    data.add_argument("--freq", default=None, help="step, e.g. h, 15min, D (default: inferred)")
    split = data.add_mutually_exclusive_group()
    split.add_argument("--split-preset", choices=["ett-hour", "ett-minute"], default=None)
    split.add_argument(
        "--split-ratios",
        nargs=3,
        type=float,
        metavar=("TRAIN", "VAL", "TEST"),
        default=None,
        help="fractions of the rows (default 0.7 0.1 0.2)",
    )
    split.add_argument(
        "--split-borders",
        nargs="+",
        type=int,
        default=None,
        help="row borders: TRAIN_END VAL_END TEST_END, or START TRAIN_END VAL_END TEST_END",
    )


def source_from_args(
    args: argparse.Namespace,
    path: Path,
    context: int,
    horizon: int,
    columns: list[str] | None = None,
) -> tuple[DataSource, SeriesTable]:
    """Read and check the CSV the :func:`add_data_arguments` flags name (``path``; ``columns``
    when the flags give none) and choose its split borders for windows of ``context`` +
    ``horizon`` rows. Any :class:`~models.training.data.csv_file.DataError` names the row or column
    at fault."""
    table = load_series_csv(path, args.date_column, args.columns or columns, args.freq)
    borders = split_borders(
        len(table.values),
        context,
        horizon,
        ratios=args.split_ratios,
        borders=args.split_borders,
        preset=args.split_preset,
    )
    if args.split_preset:
        how = f"preset {args.split_preset}"
    elif args.split_borders:
        how = "borders " + " ".join(map(str, args.split_borders))
    else:
        how = "ratios " + "/".join(f"{r:g}" for r in (args.split_ratios or (0.7, 0.1, 0.2)))
    source = DataSource(
        path=portable_path(Path(path)),
        date_column=args.date_column,
        columns=tuple(table.channels),
        freq=table.freq,
        borders=borders,
        split=how,
    )
    return source, table
