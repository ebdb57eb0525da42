"""Shared helpers for the Informer tests (no tests here): a tiny checkpoint, the data skip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from models.informer.checkpoint import save_checkpoint
from models.informer.config import preset
from models.informer.data import ETTH1_CHANNELS, StandardScaler, etth1_path
from models.informer.model import Informer

needs_data = pytest.mark.skipif(
    not etth1_path().is_file(),
    reason=f"ETTh1 not found at {etth1_path()} (set ATTNSERVE_DATA_DIR to the shared data folder)",
)


def tiny_checkpoint(directory: Path, seed: int = 0) -> Path:
    """A randomly initialised tiny 7-channel Informer saved as a checkpoint folder."""
    torch.manual_seed(seed)
    model = Informer(preset("tiny", revin=True)).eval()
    scaler = StandardScaler(np.linspace(1.0, 7.0, 7), np.linspace(0.5, 2.0, 7))
    save_checkpoint(directory, model, scaler, list(ETTH1_CHANNELS), {"backend": "probsparse"})
    return directory


def hourly_series(rows: int, start: str = "2017-01-01 00:00:00", seed: int = 0):
    """Regular hourly timestamps (strings) and plausible 7-channel values (lists)."""
    index = pd.date_range(start, periods=rows, freq="h")
    rng = np.random.default_rng(seed)
    t = np.arange(rows)[:, None]
    values = 3.0 + np.sin(2 * np.pi * t / 24 + np.arange(7)) + 0.1 * rng.standard_normal((rows, 7))
    return [ts.strftime("%Y-%m-%d %H:%M:%S") for ts in index], values.tolist()


@pytest.fixture(autouse=True)
def one_thread():
    """Run each Informer test on one thread: on a small shared CPU, extra threads only contend."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
