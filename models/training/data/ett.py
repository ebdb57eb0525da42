"""ETTh1 loading, the paper's 12/4/4-month split, the train-only scaler and sliding windows.

Protocol of Informer2020 ``data/data_loader.py::Dataset_ETT_hour``: a month counts as 30 days;
train rows ``[0, 8640)``, val ``[8640, 11520)``, test ``[11520, 14400)``; the val and test arrays
start ``seq_len`` rows before their boundary so the first window can look back; a standard scaler
is fit on the train rows only. Every window that fits is used (``len - seq_len - pred_len + 1``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch.utils.data import Dataset

from models.informer.scaler import StandardScaler
from models.informer.timefeatures import time_features

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_ENV = "ATTNSERVE_DATA_DIR"
ETTH1_CHANNELS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")

_MONTH = 30 * 24  # hours in a 30-day month
SPLIT_BORDERS = {  # rows [start, end) before the seq_len look-back is prepended
    "train": (0, 12 * _MONTH),
    "val": (12 * _MONTH, 16 * _MONTH),
    "test": (16 * _MONTH, 20 * _MONTH),
}


def data_dir() -> Path:
    """Root of the data sets: ``$ATTNSERVE_DATA_DIR``, else the repository's own ``data/``."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else REPO_ROOT / "data"


def etth1_path() -> Path:
    return data_dir() / "ETT" / "ETTh1.csv"


@dataclass
class SplitArrays:
    """One split: scaled values ``[n, c]``, calendar features ``[n, f]`` and timestamps."""

    values: np.ndarray
    marks: np.ndarray
    index: pd.DatetimeIndex


def load_etth1(path: Path | None = None) -> tuple[pd.DatetimeIndex, np.ndarray]:
    """Timestamps and the 7 channel values ``[n, 7]`` (float64) of ETTh1."""
    path = path or etth1_path()
    frame = pd.read_csv(path)
    index = pd.DatetimeIndex(pd.to_datetime(frame["date"]))
    return index, frame[list(ETTH1_CHANNELS)].to_numpy(dtype=np.float64)


def make_splits(
    seq_len: int, freq: str = "h", path: Path | None = None
) -> tuple[dict[str, SplitArrays], StandardScaler]:
    """The three splits, scaled with a scaler fit on train rows, and that scaler."""
    index, raw = load_etth1(path)
    lo, hi = SPLIT_BORDERS["train"]
    scaler = StandardScaler.fit(raw[lo:hi])
    scaled = scaler.transform(raw).astype(np.float32)
    marks = time_features(index, freq)
    splits = {}
    for name, (start, end) in SPLIT_BORDERS.items():
        begin = start if name == "train" else start - seq_len
        splits[name] = SplitArrays(scaled[begin:end], marks[begin:end], index[begin:end])
    return splits, scaler


class WindowDataset(Dataset):
    """Sliding windows over one split, in the reference's layout.

    Item ``i``: encoder input rows ``[i, i+seq_len)``; decoder target rows
    ``[i+seq_len-label_len, i+seq_len+pred_len)`` (start token then horizon); their calendar marks.
    """

    def __init__(self, split: SplitArrays, seq_len: int, label_len: int, pred_len: int) -> None:
        self.x = torch.from_numpy(np.ascontiguousarray(split.values))
        self.m = torch.from_numpy(np.ascontiguousarray(split.marks))
        self.seq_len, self.label_len, self.pred_len = seq_len, label_len, pred_len

    def __len__(self) -> int:
        return max(0, len(self.x) - self.seq_len - self.pred_len + 1)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        s_end = i + self.seq_len
        r_begin, r_end = s_end - self.label_len, s_end + self.pred_len
        return self.x[i:s_end], self.m[i:s_end], self.x[r_begin:r_end], self.m[r_begin:r_end]


def decoder_input(y: Tensor, label_len: int, pred_len: int) -> Tensor:
    """Generative-decoder input: the known start token followed by zero placeholders.

    ``y``: ``[b, label_len + pred_len(or more), c]`` -> ``[b, label_len + pred_len, c]``.
    """
    start = y[:, :label_len]
    return torch.cat([start, start.new_zeros(start.shape[0], pred_len, start.shape[2])], dim=1)
