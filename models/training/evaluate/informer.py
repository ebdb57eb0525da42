"""``attnserve evaluate``: test quality of Informer checkpoints, per attention backend, beside the
closed-form linear baseline on the same windows.

For each checkpoint: MSE and MAE on the scaled test split (train-split scaler, every window) for
every backend at its default options, and the NLinear-style ridge map (:mod:`models.training.linear`) fitted on
the same train split at the same context and horizon — the bar a forecaster must clear to be
worth serving. The data are rebuilt from the checkpoint's own ``data`` record (CSV, columns,
split borders). Writes ``quality.json`` into the checkpoint folder (served by ``GET /models``;
its ``slice`` entry is what the tests reproduce) and, for the shipped checkpoints, the table in
``models/training/RESULTS.md``.

    attnserve evaluate                                  # every shipped checkpoint + RESULTS.md
    attnserve evaluate runs/my-model --backends flash performer
    attnserve evaluate runs/long-model --backends full --stride 8   # every 8th test window
    attnserve evaluate runs/long-model --variants performer:num_features=16 --stride 16

``--stride k`` scores the listed backends on every k-th test window only, and the linear baseline
on the same windows beside them (recorded per backend): for long contexts, where exact attention
over ten thousand windows costs hours on a CPU and neighbouring windows overlap almost entirely.

``--variants backend:option=value[,option=value]`` also scores a backend at options other than
its defaults (recorded under ``variants``): the figures ``attention: "auto"`` needs before it may
pick those options (:mod:`service.engine.auto_attention`). With ``--variants`` and no ``--backends``,
only the variants are scored.

``--precisions bfloat16 int8`` also scores the backends in those precisions
(:mod:`models.training.evaluate.forecast_quality`).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset

from models.attention.base import AttentionError
from models.attention.registry import names
from models.informer.checkpoint import shipped_dirs
from models.informer.forecaster import InformerForecaster
from models.informer.timefeatures import format_timestamps
from models.quality_file import save_quality
from models.training.data.ett import WindowDataset
from models.training.data.source import DataSource, is_etth1_protocol, is_ettm1_protocol, source_of
from models.training.data.table import SeriesTable
from models.training.evaluate.forecast_quality import (
    Scoring,
    score_all_precisions,
)
from models.training.evaluate.metrics import evaluate_loader
from models.training.evaluate.results_table import write_results
from models.training.linear import LinearBaseline

# Zhou et al. 2021, Table 2 (multivariate, Informer): (dataset, horizon) -> (MSE, MAE).
PAPER = {
    ("ETTh1", 24): (0.577, 0.549),
    ("ETTh1", 48): (0.685, 0.625),
    ("ETTh1", 168): (0.931, 0.752),
    ("ETTh1", 336): (1.128, 0.873),
    ("ETTh1", 720): (1.215, 0.896),
    ("ETTm1", 24): (0.323, 0.369),
    ("ETTm1", 48): (0.494, 0.503),
    ("ETTm1", 96): (0.678, 0.614),
    ("ETTm1", 288): (1.056, 0.786),
    ("ETTm1", 672): (1.192, 0.926),
}
SLICE_WINDOWS = 16  # test windows the tests re-run through the public forecaster API


def slice_indices(n_windows: int, count: int = SLICE_WINDOWS) -> list[int]:
    """Evenly spaced test-window indices (first and last included)."""
    return np.linspace(0, n_windows - 1, count).round().astype(int).tolist()


def slice_mse(
    forecaster: InformerForecaster,
    backend: str,
    indices: list[int],
    table: SeriesTable,
    source: DataSource,
) -> float:
    """MSE (scaled units) of the public ``prepare``/``predict`` path on the given test windows.

    Window ``i`` uses rows ``[t0 - context + i, t0 + i)`` of the CSV (``t0`` the first test row)
    as history in original units and the next ``horizon`` rows as the target, exactly as
    :class:`~models.training.data.ett.WindowDataset` does on the test split.
    """
    start = source.borders["test"][0] - forecaster.context
    ctx, horizon = forecaster.context, forecaster.horizon
    windows, targets = [], []
    for i in indices:
        a = start + i
        stamps = format_timestamps(table.stamps[a : a + ctx])
        windows.append(forecaster.prepare(stamps, table.values[a : a + ctx].tolist()))
        targets.append(forecaster.scaler.transform(table.values[a + ctx : a + ctx + horizon]))
    preds = forecaster.predict(windows, backend=backend)
    pred = np.stack([forecaster.scaler.transform(np.asarray(p.values)) for p in preds])
    return float(np.mean((pred - np.stack(targets)) ** 2))


def evaluate_checkpoint(
    name_or_path: str | Path,
    backends: list[str] | None = None,
    data: Path | None = None,
    stride: int = 1,
    variants: list[tuple[str, dict[str, Any]]] | None = None,
    precisions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Test metrics per backend and the linear baseline, written to ``quality.json`` (merged
    with the backends and variants scored before).

    ``data`` points at the CSV when it moved since training (same columns and rows); ``stride``
    k scores the backends on every k-th test window (see the module docstring); ``variants``
    are ``(backend, options)`` pairs scored beside them (``backends=None`` with variants given:
    only the variants).
    """
    if stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    f = InformerForecaster.load(str(name_or_path))
    cfg = f.model.config
    variants = list(variants or [])
    for backend, options in variants:  # bad options fail here, before any scoring
        f.check_attention(backend, options)
    if backends is None:
        backends = [] if variants else list(names())
    source = source_of(f.meta)
    if data is not None:
        source = replace(source, path=str(Path(data).resolve()))
    table, splits, scaler = source.load(cfg.seq_len)
    if not np.allclose(scaler.mean, f.scaler.mean) or not np.allclose(scaler.std, f.scaler.std):
        raise RuntimeError(
            f"{f.name}: the scaler fit on the train split of {source.path} differs from the "
            "checkpoint's: is this the data it was trained on?"
        )
    test = WindowDataset(splits["test"], cfg.seq_len, cfg.label_len, cfg.pred_len)
    scored = test if stride == 1 else Subset(test, range(0, len(test), stride))
    loader = DataLoader(scored, batch_size=128)
    indices = slice_indices(len(test))

    t0 = time.time()
    linear = LinearBaseline.fit(splits["train"].values, cfg.seq_len, cfg.pred_len)
    lin_mse, lin_mae = linear.score(splits["test"].values)
    lin_scored = linear.score(splits["test"].values, stride)[0] if stride > 1 else lin_mse
    print(
        f"{f.name} linear baseline MSE {lin_mse:.4f} MAE {lin_mae:.4f} ({time.time() - t0:.0f}s)",
        flush=True,
    )

    slice_res: dict[str, float] = dict(f.quality.get("slice", {}).get("mse", {}))
    scoring = Scoring(f.name, lin_scored, len(scored), stride)

    def score(
        backend: str, options: dict[str, Any] | None = None, model: Any = None, tag: str = ""
    ) -> dict[str, Any]:
        t0 = time.time()
        with torch.inference_mode(model is not None):  # a converted copy: no autograd
            mse, mae = evaluate_loader(model or f.model, loader, backend, options)
        layers = f.layer_backends(backend)
        return scoring.entry(backend, options, tag, mse, mae, layers, time.time() - t0)

    network_in = functools.cache(lambda p: f.with_precision(p).model)  # converted once each
    by_precision = score_all_precisions(
        f.quality, f.default_attention, backends, variants, precisions, score, network_in
    )
    for backend in backends:  # the public path on the slice the tests re-run
        slice_res[backend] = round(slice_mse(f, backend, indices, table, source), 6)
    paper = None
    if is_etth1_protocol(source):
        paper = PAPER.get(("ETTh1", cfg.pred_len))
    elif is_ettm1_protocol(source):
        paper = PAPER.get(("ETTm1", cfg.pred_len))
    quality = {
        "dataset": source.describe(),
        "metric_space": "scaled (train-split StandardScaler), averaged over the windows scored "
        "(each backend's `windows`; the linear baseline's over all)",
        "windows": len(test),
        "context": cfg.seq_len,
        "horizon": cfg.pred_len,
        "default_backend": f.default_attention,
        "linear_baseline": {
            "mse": round(lin_mse, 6),
            "mae": round(lin_mae, 6),
            "what": f"NLinear-style ridge map, context {cfg.seq_len} -> horizon {cfg.pred_len}, "
            f"one matrix for all channels, fit in closed form on the train split "
            f"(ridge {linear.ridge:g} per row)",
        },
        "paper": {"mse": paper[0], "mae": paper[1]} if paper else None,
        "precisions": by_precision,
        "slice": {
            "indices": indices,
            "mse": slice_res,
            "note": "public prepare/predict path on these test windows; tests reproduce it",
        },
    }
    save_quality(f.directory / "quality.json", quality)
    return quality


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``performer:num_features=16,...`` -> ``("performer", {"num_features": 16})``; numbers
    become int or float, anything else stays a string. ValueError on a malformed spec."""
    backend, sep, rest = text.partition(":")
    if backend not in names() or not sep or not rest:
        raise ValueError(
            f"variant {text!r}: expected backend:option=value[,option=value] with a backend "
            f"among {', '.join(names())}"
        )
    options: dict[str, Any] = {}
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"variant {text!r}: {item!r} is not option=value")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return backend, options


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="attnserve evaluate",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument(
        "checkpoints",
        nargs="*",
        help="checkpoint folders or shipped names "
        "(default: every shipped checkpoint, and RESULTS.md is rewritten)",
    )
    p.add_argument(
        "--backends",
        nargs="+",
        default=None,
        choices=list(names()),
        help="backends to score at their default options (default: all, or none with --variants)",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=[],
        metavar="BACKEND:OPTION=VALUE[,...]",
        help="also score these backends at these options (e.g. performer:num_features=16)",
    )
    p.add_argument(
        "--precisions",
        nargs="+",
        default=[],
        choices=["bfloat16", "int8", "float16"],
        help="also score the backends (or the default one) in these precisions",
    )
    p.add_argument("--data", type=Path, default=None, help="the CSV, if it moved since training")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--stride",
        type=int,
        default=1,
        help="score every k-th test window only (default 1: all)",
    )
    args = p.parse_args(argv)
    if args.stride < 1:
        p.error(f"--stride must be at least 1, got {args.stride}")
    try:
        variants = [parse_variant(v) for v in args.variants]
    except ValueError as err:
        p.error(str(err))
    torch.set_num_threads(args.threads)
    for name in args.checkpoints or list(shipped_dirs()):
        try:
            evaluate_checkpoint(
                name, args.backends, args.data, args.stride, variants, tuple(args.precisions)
            )
        except AttentionError as err:  # a variant's options, refused before any scoring
            p.error(str(err))
    if not args.checkpoints:
        print(write_results())


if __name__ == "__main__":
    main()
