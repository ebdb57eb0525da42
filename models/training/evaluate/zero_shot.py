"""``attnserve evaluate FOLDER --data CSV`` for a zero-shot forecaster folder (TimesFM 2.5,
Chronos-2): MSE, MASE and the weighted quantile loss per attention backend and precision on a
CSV's test split, beside the seasonal-naive forecast and the closed-form linear baseline fit on
its train split, written to the folder's ``quality.json`` (so ``GET /models`` and
``attention: "auto"`` read it like any forecaster's) and printed as a table, the default
(``flash``) row the reference.

    attnserve evaluate timesfm-2.5 --data sales.csv --columns units --stride 8
    attnserve evaluate chronos-2 --data ETTh1.csv --split-preset ett-hour --context 512 --horizon 96

A zero-shot model records no training data, so the CSV, its value columns and its split come
from the flags, as for ``attnserve train``; only the test split is forecast (the train split
fits the linear baseline and the scaling of MSE). Each test window looks back ``--context``
rows (default the model's context, capped so the train split still holds one window) and
forecasts ``--horizon`` rows (default the model's horizon); every ``--stride``-th window is
scored. Metrics: :mod:`models.training.evaluate.zero_shot_metrics`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from models.attention.base import AttentionError
from models.attention.registry import names
from models.errors import ModelInputError
from models.hf_forecast.folder import FolderError
from models.names import DEFAULT_PRECISION
from models.quality_file import backend_rows, save_quality
from models.training.data.csv_file import DataError
from models.training.data.source import DataSource, add_data_arguments, source_from_args
from models.training.data.splits import split_borders
from models.training.data.table import SeriesTable
from models.training.evaluate.forecast_quality import (
    Scoring,
    forecaster_parser,
    score_all_precisions,
)
from models.training.evaluate.zero_shot_metrics import (
    Scores,
    infer_season,
    insample_scales,
    rounded,
    score_baseline,
    seasonal_naive,
)
from models.training.linear import LinearBaseline
from models.zero_shot.folder import load_zero_shot

BATCH = 32  # windows per forward pass


class Windows:
    """The test windows scored: rows ``starts[i] : starts[i] + context`` as history, the next
    ``horizon`` rows as target, with the train split's scaling and each window's MASE scale."""

    def __init__(
        self, table: SeriesTable, source: DataSource, context: int, horizon: int, stride: int
    ) -> None:
        self.values = table.values
        self.context, self.horizon = context, horizon
        lo, hi = source.borders["train"]
        t0, t1 = source.borders["test"]
        self.train = table.values[lo:hi]
        self.std = self.train.std(axis=0)
        self.std = np.where(self.std > 0, self.std, 1.0)  # a constant channel: unscaled
        self.every = np.arange(t0, t1 - horizon + 1) - context  # history start of each window
        self.stride = stride
        self.starts = self.every[::stride]

    def history(self, chunk: np.ndarray) -> np.ndarray:
        """``[w, n, c]`` of the windows starting at rows ``chunk``."""
        return np.stack([self.values[a : a + self.context] for a in chunk])

    def target(self, chunk: np.ndarray) -> np.ndarray:
        """``[w, h, c]``: the rows after each history."""
        n, h = self.context, self.horizon
        return np.stack([self.values[a + n : a + n + h] for a in chunk])

    def scales(self, chunk: np.ndarray, season: int) -> np.ndarray:
        """``[w, c]``: MASE's in-sample seasonal-naive error before each forecast starts."""
        return insample_scales(self.values, chunk + self.context, season)


def evaluate_zero_shot(
    forecaster: Any,
    source: DataSource,
    table: SeriesTable,
    windows: Windows,
    season: int,
    backends: list[str],
    precisions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Score ``forecaster`` (a :class:`~models.zero_shot.forecaster.ZeroShotForecaster`) with
    each of ``backends`` on ``windows`` in its own precision and each of ``precisions``; write
    and return its ``quality.json``."""
    f = forecaster
    converted = {p: f.with_precision(p) for p in precisions if p != DEFAULT_PRECISION}
    ctx, horizon, starts, levels = windows.context, windows.horizon, windows.starts, f.levels
    everything = windows.every
    target, scales = windows.target(starts), windows.scales(starts, season)
    naive = score_baseline(
        levels,
        seasonal_naive(windows.history(starts), horizon, season),
        target,
        windows.std,
        scales,
    )
    mean = windows.train.mean(axis=0)
    linear = LinearBaseline.fit((windows.train - mean) / windows.std, ctx, horizon)

    def linear_forecast(chunk: np.ndarray) -> np.ndarray:
        scaled = (windows.history(chunk) - mean) / windows.std  # [w, n, c]
        out = linear.predict(scaled.transpose(0, 2, 1)).transpose(0, 2, 1)  # [w, h, c]
        return out * windows.std + mean

    lin = score_baseline(levels, linear_forecast(starts), target, windows.std, scales)
    lin_all = score_baseline(
        levels,
        linear_forecast(everything),
        windows.target(everything),
        windows.std,
        windows.scales(everything, season),
    )
    scoring = Scoring(f.name, lin["mse"], len(starts), windows.stride)

    def score(
        backend: str, options: dict[str, Any] | None = None, g: Any = f, tag: str = ""
    ) -> dict[str, Any]:
        began = time.time()
        scores = Scores(tuple(levels))
        for s in range(0, len(starts), BATCH):
            chunk = starts[s : s + BATCH]
            prepared = [g.prepare(values=h) for h in windows.history(chunk)]
            answers = g.predict(prepared, backend, options, horizon)
            # [w, h, c] and [w, q, h, c]; cut to the horizon asked (a model may answer more)
            point = np.stack([np.asarray(a.values, dtype=np.float64)[:horizon] for a in answers])
            quantiles = np.stack(
                [np.asarray(a.quantiles, dtype=np.float64)[:, :horizon] for a in answers]
            )
            scores.add(point, quantiles, windows.target(chunk), windows.std, scales[s : s + BATCH])
        figures = scores.figures()
        layers = {k: v.backend for k, v in g.plan(backend, options, g.tokens_of(ctx)).items()}
        entry = scoring.entry(
            backend, options, tag, figures["mse"], figures["mae"], layers, time.time() - began
        )
        return {**entry, "mase": round(figures["mase"], 6), "wql": round(figures["wql"], 6)}

    by_precision = score_all_precisions(
        f.quality, f.default_attention, backends, [], precisions, score, converted.__getitem__
    )
    quality = {
        "dataset": source.describe(),
        "metric_space": "mse/mae scaled by the train split's standard deviation per channel; "
        "mase and wql in original units (models/training/evaluate/zero_shot_metrics.py)",
        "model": f"zero-shot {f.architecture} (point forecast; wql over its quantile levels)",
        "levels": list(levels),
        "windows": len(everything),
        "context": ctx,
        "horizon": horizon,
        "season": season,
        "default_backend": f.default_attention,
        "seasonal_naive": {**rounded(naive), "windows": len(starts)},
        "linear_baseline": {
            **rounded(lin_all),
            "what": f"NLinear-style ridge map, context {ctx} -> horizon {horizon}, one matrix "
            f"for all channels, fit in closed form on the train split (ridge {linear.ridge:g} "
            "per row); figures over every test window",
        },
        "precisions": by_precision,
    }
    save_quality(f.directory / "quality.json", quality)
    f.quality = quality
    print(quality_table(quality, lin, f.precision))
    return quality


def quality_table(quality: dict[str, Any], linear: dict[str, float], precision: str) -> str:
    """Markdown table: the baselines, then each backend (and precision), MSE relative to the
    default backend's row in the forecaster's own ``precision``."""
    default = quality["default_backend"]
    rows = [(label, r) for label, r in backend_rows(quality)]
    reference = next(r for label, r in rows if label == default)
    lines = [
        "| forecast | MSE | MAE | MASE | WQL | MSE vs " + default + " | MSE vs linear |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    baselines = [("*seasonal naive*", quality["seasonal_naive"]), ("*linear*", linear)]
    for label, r in baselines + rows:
        vs_ref = r["mse"] / reference["mse"] - 1
        vs_lin = r["mse"] / linear["mse"] - 1
        shown = f"**{label}**" if label == default else label
        lines.append(
            f"| {shown} | {r['mse']:.4f} | {r['mae']:.4f} | {r['mase']:.4f} | {r['wql']:.4f} | "
            f"{vs_ref:+.2%} | {vs_lin:+.2%} |"
        )
    return "\n".join(lines) + f"\n({quality['windows']} test windows, season {quality['season']})"


def choose_context(
    args: argparse.Namespace, model_context: int, table: SeriesTable, horizon: int
) -> int:
    """``--context``, or the model's context capped so the train split holds one window (the
    linear baseline's fit); ``DataError`` when the split cannot hold the one asked for."""
    if args.context is not None and args.context > model_context:
        raise DataError(
            f"--context {args.context} is longer than the model reads ({model_context} steps)"
        )
    split = {
        "ratios": args.split_ratios,
        "borders": args.split_borders,
        "preset": args.split_preset,
    }
    lo, hi = split_borders(len(table), 1, horizon, **split)["train"]
    context = args.context or min(model_context, hi - lo - horizon)
    split_borders(len(table), context, horizon, **split)  # says what is too short
    return context


def main(argv: list[str] | None = None) -> None:
    p = forecaster_parser(
        __doc__,
        "a TimesFM 2.5 or Chronos-2 folder",
        "also score the backends in these precisions (where the forecaster runs them)",
    )
    p.add_argument("--context", type=int, default=None, help="history steps per window")
    p.add_argument("--horizon", type=int, default=None, help="steps forecast per window")
    p.add_argument(
        "--season", type=int, default=None, help="MASE's season in steps (default: from --freq)"
    )
    add_data_arguments(p, "data (required: a zero-shot folder records none)")
    args = p.parse_args(argv)
    for flag in ("context", "horizon", "season", "stride"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag} must be at least 1, got {value}")
    if args.data is None:
        p.error("a zero-shot folder records no data: give --data CSV (and --columns, --split-*)")
    torch.set_num_threads(args.threads)
    try:
        forecaster = load_zero_shot(args.folder)
        horizon = forecaster.check_horizon(args.horizon)
        for precision in args.precisions:  # refused before any scoring
            forecaster.with_precision(precision)
        source, table = source_from_args(args, args.data, 1, horizon)
        context = choose_context(args, forecaster.context, table, horizon)
        windows = Windows(table, source, context, horizon, args.stride)
        season = args.season or infer_season(table.freq)
        if season > context:
            if args.season:
                raise DataError(f"--season {season} is longer than the context ({context})")
            print(f"season {season} of {table.freq} exceeds the context {context}: using 1")
            season = 1
    except (ValueError, AttentionError, DataError, FolderError, ModelInputError) as exc:
        p.error(str(exc))
    backends = args.backends if args.backends is not None else list(names())
    evaluate_zero_shot(forecaster, source, table, windows, season, backends, tuple(args.precisions))


if __name__ == "__main__":
    main()
