"""Helpers for the Informer tests: a tiny checkpoint and the data check (one torch thread:
the ``one_thread`` fixture of ``tests/unit/conftest.py``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from models.informer.checkpoint import save_checkpoint
from models.informer.config import preset
from models.informer.model import Informer
from models.informer.scaler import StandardScaler
from models.training.data.ett import DATA_ENV, ETTH1_CHANNELS, decoder_input, etth1_path


def needs_data(test: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test that reads ETTh1. The file ships in ``data/ETT/``, so a missing one fails the
    test with a clear message (a broken checkout or a wrong ``ATTNSERVE_DATA_DIR``), never skips.
    ``functools.wraps`` keeps the signature, so fixtures and parametrize still work."""

    @functools.wraps(test)
    def checked(*args: Any, **kwargs: Any) -> Any:
        path = etth1_path()
        if not path.is_file():
            pytest.fail(
                f"ETTh1 missing at {path}; it ships in data/ETT/ "
                f"(ATTNSERVE_DATA_DIR={os.environ.get(DATA_ENV)!r})",
                pytrace=False,
            )
        return test(*args, **kwargs)

    return checked


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


def random_batch(cfg, b: int = 3, seed: int = 0, walk: bool = False):
    """Model inputs for ``cfg``: history, its marks, decoder input (start token, zeros), marks.
    ``walk`` makes the history a random walk (smooth, like real series) instead of white noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, cfg.seq_len, cfg.enc_in, generator=g)
    x = x.cumsum(1) * 0.1 if walk else x
    xm = torch.rand(b, cfg.seq_len, cfg.time_features, generator=g) - 0.5
    y = torch.randn(b, cfg.dec_len, cfg.dec_in, generator=g)
    ym = torch.rand(b, cfg.dec_len, cfg.time_features, generator=g) - 0.5
    return x, xm, decoder_input(y, cfg.label_len, cfg.pred_len), ym
