"""``attnserve evaluate FOLDER`` for a transformers time-series folder: test MSE/MAE per attention
backend beside the closed-form linear baseline at the same context and horizon, written to the
folder's ``quality.json`` in the format of our own checkpoints, so ``GET /models``, the quality
table and ``attention: "auto"`` treat the folder like any shipped forecaster.

The data come from the folder's ``attnserve.json`` (``data``: the CSV and split it was trained on,
written by ``models.training.patchtst_train``) or from the command line, as for
``attnserve train``:

    attnserve evaluate runs/my-patchtst                      # its recorded data
    attnserve evaluate my-patchtst --data sales.csv --split-ratios 0.7 0.1 0.2 --stride 4

Metrics are in the train split's standardised units (each channel's error over its train
standard deviation), as for our checkpoints, on every ``--stride``-th test window; a
probabilistic head is scored on its mean. Models that need covariates (``time_features``,
static features) are refused: the features they were trained with are not in a CSV.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.attention.base import AttentionError
from models.attention.registry import names
from models.hf_forecast.folder import read_sidecar
from models.hf_forecast.forecaster import HFForecaster
from models.quality_file import save_quality
from models.training.data.csv_file import DataError
from models.training.data.source import DataSource, add_data_arguments, source_from_args
from models.training.data.table import SeriesTable, load_series_csv
from models.training.evaluate.forecast_quality import (
    Scoring,
    forecaster_parser,
    score_all_precisions,
)
from models.training.evaluate.informer import parse_variant, slice_indices
from models.training.linear import LinearBaseline

BATCH = 64


def data_source(
    args: argparse.Namespace, forecaster: HFForecaster
) -> tuple[DataSource, SeriesTable]:
    """The recorded source (``attnserve.json``), or the one the flags describe."""
    if args.data is None:
        record = read_sidecar(forecaster.directory).data
        if record is None:
            raise SystemExit(
                f"attnserve evaluate: {forecaster.name} records no data; give --data CSV (and "
                "--split-preset/--split-ratios/--split-borders)"
            )
        source = DataSource.from_dict(record)
        table = load_series_csv(
            source.resolved_path(), source.date_column, list(source.columns), source.freq
        )
        return source, table
    named = list(forecaster.channels) if forecaster.sidecar.channels else None
    return source_from_args(args, args.data, forecaster.context, forecaster.horizon, named)


def evaluate_folder(
    folder: Path,
    source: DataSource,
    table: SeriesTable,
    backends: list[str],
    variants: list[tuple[str, dict[str, Any]]],
    stride: int,
    forecaster: HFForecaster | None = None,
    precisions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Score ``backends`` (and ``variants``) on every ``stride``-th test window, and
    ``backends`` (or the default one) again in each of ``precisions``; write and return
    ``quality.json``.

    Raises:
        ValueError: a precision this folder's model does not run in (the message says which
            run).
    """
    f = forecaster or HFForecaster.load(folder)
    converted = {p: f.with_precision(p) for p in precisions if p != "float32"}  # refused first
    if (
        f.family.time_feature_width
        or getattr(f.family, "static_categorical", 0)
        or getattr(f.family, "static_real", 0)
    ):
        raise SystemExit(
            f"attnserve evaluate: {f.name} needs covariates (time_features / static features) "
            "that a CSV does not hold; evaluate it with the pipeline it was trained with"
        )
    if len(table.channels) != len(f.channels):
        raise SystemExit(
            f"attnserve evaluate: the CSV has {len(table.channels)} value columns, {f.name} "
            f"forecasts {len(f.channels)}; choose them with --columns"
        )
    ctx, horizon = f.context, f.horizon
    lo, hi = source.borders["train"]
    mean, std = table.values[lo:hi].mean(axis=0), table.values[lo:hi].std(axis=0)
    scaled = (table.values - mean) / std
    t0, t1 = source.borders["test"]
    test = scaled[t0 - ctx : t1]
    linear = LinearBaseline.fit(scaled[lo:hi], ctx, horizon)
    lin_mse, lin_mae = linear.score(test)
    lin_scored = linear.score(test, stride)[0]
    starts = np.arange(0, len(test) - ctx - horizon + 1)[::stride] + t0 - ctx
    print(f"{f.name}: linear baseline MSE {lin_mse:.4f} MAE {lin_mae:.4f}", flush=True)

    def forecast(
        backend: str, options: dict[str, Any] | None, chunk: np.ndarray, g: HFForecaster = f
    ) -> np.ndarray:
        """Forecasts ``[len(chunk), horizon, c]`` of the windows starting at rows ``chunk``
        (by ``g``: this forecaster or a copy in another precision)."""
        windows = [g.prepare(values=table.values[a : a + ctx]) for a in chunk]
        return np.stack([np.asarray(p.values) for p in g.predict(windows, backend, options)])

    def target(chunk: np.ndarray) -> np.ndarray:
        return np.stack([table.values[a + ctx : a + ctx + horizon] for a in chunk])

    every = np.arange(0, len(test) - ctx - horizon + 1) + t0 - ctx
    picked = every[slice_indices(len(every))]

    def slice_mse(backend: str) -> float:
        """MSE on :func:`slice_indices`' test windows (the tests re-run these)."""
        err = (forecast(backend, None, picked) - target(picked)) / std
        return round(float(np.square(err).mean()), 6)

    scoring = Scoring(f.name, lin_scored, len(starts), stride)

    def score(
        backend: str, options: dict[str, Any] | None = None, g: HFForecaster = f, tag: str = ""
    ) -> dict[str, Any]:
        began = time.time()
        se = ae = 0.0
        for s in range(0, len(starts), BATCH):
            chunk = starts[s : s + BATCH]
            err = (forecast(backend, options, chunk, g) - target(chunk)) / std
            se, ae = se + float(np.square(err).sum()), ae + float(np.abs(err).sum())
        count = len(starts) * horizon * len(f.channels)
        layers = {k: v.backend for k, v in f.plan(backend, options).items()}
        seconds = time.time() - began
        return scoring.entry(backend, options, tag, se / count, ae / count, layers, seconds)

    by_precision = score_all_precisions(
        f.quality, f.default_attention, backends, variants, precisions, score, converted.__getitem__
    )
    slices: dict[str, float] = dict(f.quality.get("slice", {}).get("mse", {}))
    for backend in backends:
        slices[backend] = slice_mse(backend)
    quality = {
        "dataset": source.describe(),
        "metric_space": "scaled (train-split mean and standard deviation per channel), averaged "
        "over the windows scored (each backend's `windows`; the linear baseline's over all)",
        "model": f"transformers {type(f.model).__name__}"
        + (" (scored on its distribution's mean)" if f.probabilistic else ""),
        "windows": len(test) - ctx - horizon + 1,
        "context": ctx,
        "horizon": horizon,
        "default_backend": f.default_attention,
        "linear_baseline": {
            "mse": round(lin_mse, 6),
            "mae": round(lin_mae, 6),
            "what": f"NLinear-style ridge map, context {ctx} -> horizon {horizon}, one matrix "
            f"for all channels, fit in closed form on the train split (ridge {linear.ridge:g} "
            "per row)",
        },
        "precisions": by_precision,
        "slice": {
            "indices": slice_indices(len(every)),
            "mse": slices,
            "note": "public prepare/predict path on these test windows; tests reproduce it",
        },
    }
    save_quality(f.directory / "quality.json", quality)
    f.quality = quality
    return quality


def main(argv: list[str] | None = None) -> None:
    p = forecaster_parser(
        __doc__,
        "a transformers time-series folder",
        "also score the backends (or the default one) in these precisions (bfloat16: "
        "PatchTST with a point head)",
    )
    p.add_argument("--variants", nargs="+", default=[], metavar="BACKEND:OPTION=VALUE[,...]")
    add_data_arguments(p, "data (default: the folder's attnserve.json record)")
    args = p.parse_args(argv)
    if args.stride < 1:
        p.error(f"--stride must be at least 1, got {args.stride}")
    torch.set_num_threads(args.threads)
    try:
        variants = [parse_variant(v) for v in args.variants]
        forecaster = HFForecaster.load(args.folder)
        for backend, options in variants:
            forecaster.check_attention(backend, options)
        precisions = tuple(args.precisions)
        for precision in precisions:  # one the model does not run in: refused before scoring
            forecaster.with_precision(precision)
        source, table = data_source(args, forecaster)
    except (ValueError, AttentionError, DataError) as exc:
        p.error(str(exc))
    backends = args.backends if args.backends is not None else ([] if variants else list(names()))
    evaluate_folder(
        args.folder, source, table, backends, variants, args.stride, forecaster, precisions
    )


if __name__ == "__main__":
    main()
