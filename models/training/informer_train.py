"""``attnserve train``: fit an Informer-family forecaster on any CSV and write a checkpoint folder.

Data: a CSV with a date column and value columns (all others by default), read and checked by
:mod:`models.training.data.table`; split by ratios, explicit row borders or a named preset (the ETT
12/4/4-month protocol). Protocol after Zhou et al. 2021 / Informer2020 ``exp/exp_informer.py``:
scaler fit on train rows, MSE loss on scaled data, Adam, the learning rate halved after every
epoch (``lradj='type1'``; ``--lr-decay`` changes the factor), early stopping on the validation loss, the best-validation weights
kept. Fixed seeds; every epoch's order is derived from the seed and the epoch number, so
``--resume`` continues the very run that stopped.

Writes ``config.json`` (architecture, scaler, data source, the exact command), the weights and
``quality.json`` (per-backend test MSE/MAE beside the linear baseline, :mod:`.informer_evaluate`).

    attnserve train --data data/ETT/ETTh1.csv --split-preset ett-hour --context 336 \\
        --horizon 168 --preset patch --out runs/etth1-h168
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import torch

from models.attention import AttentionError, get_backend
from models.informer.checkpoint import count_parameters, save_checkpoint
from models.informer.config import PRESETS, InformerConfig, preset
from models.informer.model import Informer
from models.informer.timefeatures import feature_names
from models.training.data.csv_file import DataError
from models.training.data.ett import WindowDataset, etth1_path
from models.training.data.source import DataSource, add_data_arguments, source_from_args
from models.training.data.splits import make_splits
from models.training.data.table import SeriesTable
from models.training.informer_fit import STATE_FILE, fit_model
from models.training.linear import LinearBaseline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="attnserve train", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    add_data_arguments(p, data_help="CSV file (default: shipped ETTh1)")
    model = p.add_argument_group("model")
    model.add_argument("--context", type=int, default=96, help="rows of history (seq_len)")
    model.add_argument("--horizon", type=int, default=24, help="steps forecast (pred_len)")
    model.add_argument("--label-len", type=int, default=48, help="decoder start-token length")
    model.add_argument("--preset", default="patch", choices=sorted(PRESETS), help="model size")
    model.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set d_model=32 linear_path=false",
    )
    fit = p.add_argument_group("training")
    fit.add_argument(
        "--backend",
        default=None,
        help="attention backend trained with (and the "
        "model's default); default: the preset's default attention",
    )
    fit.add_argument(
        "--mix-backends",
        nargs="*",
        default=[],
        help="extra backends drawn per "
        "batch (seeded); validation averages over all, so every one stays good",
    )
    fit.add_argument(
        "--train-linear",
        action="store_true",
        help="train the linear path too (default: it stays the closed-form fit)",
    )
    fit.add_argument(
        "--min-gain",
        type=float,
        default=0.005,
        help="with a linear path: keep the trained network only if it lowers the validation "
        "loss of the linear starting point by at least this fraction (default 0.005)",
    )
    fit.add_argument("--epochs", type=int, default=10)
    fit.add_argument("--patience", type=int, default=3, help="early-stopping patience (epochs)")
    fit.add_argument("--lr", type=float, default=5e-4, help="initial rate")
    fit.add_argument(
        "--lr-decay",
        type=float,
        default=0.5,
        help="factor applied to the rate after every epoch (default 0.5: halved, the paper's "
        "schedule; with short --max-batches epochs a gentler factor such as 0.8 keeps learning)",
    )
    fit.add_argument("--batch-size", type=int, default=32)
    fit.add_argument("--seed", type=int, default=2021)
    fit.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    fit.add_argument(
        "--max-batches", type=int, default=0, help="cap batches per epoch (a random subset)"
    )
    fit.add_argument(
        "--val-stride",
        type=int,
        default=1,
        help="validate on every k-th window (neighbouring windows of a long context overlap "
        "almost entirely; default 1: all)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, required=True, help="checkpoint folder to write")
    out.add_argument("--resume", action="store_true", help=f"continue from {STATE_FILE} in --out")
    out.add_argument("--no-evaluate", action="store_true", help="skip quality.json at the end")
    args = p.parse_args(argv)
    if args.val_stride < 1:
        p.error(f"--val-stride must be at least 1, got {args.val_stride}")
    if not 0 < args.lr_decay <= 1:
        p.error(f"--lr-decay must be in (0, 1], got {args.lr_decay}")
    return args


def _parse_override(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise SystemExit(f"--set expects KEY=VALUE, got {text!r}")
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return key, lowered == "true"
    for kind in (int, float):
        try:
            return key, kind(raw)
        except ValueError:
            pass
    return key, raw


def data_source(args: argparse.Namespace) -> tuple[DataSource, SeriesTable]:
    """Read and check the CSV (the shipped ETTh1 under its paper split by default), choose the
    split borders: any :class:`DataError` names the row or column at fault."""
    if args.data is None and args.split_ratios is None and args.split_borders is None:
        args.split_preset = args.split_preset or "ett-hour"
    return source_from_args(args, args.data or etth1_path(), args.context, args.horizon)


def build_config(args: argparse.Namespace, source: DataSource) -> InformerConfig:
    channels = len(source.columns)
    overrides: dict[str, Any] = dict(
        seq_len=args.context,
        label_len=min(args.label_len, args.context),
        pred_len=args.horizon,
        enc_in=channels,
        dec_in=channels,
        c_out=channels,
        freq=source.freq,
        time_features=len(feature_names(source.freq)),
    )
    overrides.update(_parse_override(s) for s in args.set)
    if args.backend:
        overrides["default_attention"] = args.backend
    try:
        return preset(args.preset, **overrides)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"attnserve train: invalid model settings: {exc}") from None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        source, table = data_source(args)
    except DataError as exc:
        raise SystemExit(f"attnserve train: {exc}") from None
    config = build_config(args, source)
    backends = [config.default_attention, *args.mix_backends]
    for backend in backends:  # a typo stops here, not after the first epoch
        try:
            get_backend(backend)
        except AttentionError as exc:
            raise SystemExit(f"attnserve train: {exc}") from None
    splits, scaler = make_splits(table, source.borders, config.seq_len)
    sets = {
        k: WindowDataset(s, config.seq_len, config.label_len, config.pred_len)
        for k, s in splits.items()
    }
    torch.manual_seed(args.seed)
    model = Informer(config)
    if model.linear is not None:  # the closed-form baseline, the model's starting point
        fit = LinearBaseline.fit(splits["train"].values, config.seq_len, config.pred_len)
        model.linear.weight.data.copy_(torch.from_numpy(fit.weight.T))
        model.linear.weight.requires_grad_(args.train_linear)
    out: Path = args.out
    command = "attnserve train " + shlex.join(argv if argv is not None else sys.argv[1:])
    record = fit_model(model, sets, backends, args, out)
    record.update(command=command, parameters=count_parameters(model))
    save_checkpoint(out, model, scaler, list(source.columns), record, data=source.to_dict())
    print(
        f"saved {out}: best epoch {record['best_epoch']}, val {record['best_val_mse']:.4f}, "
        f"{record['wall_seconds']:.0f}s",
        flush=True,
    )
    if not args.no_evaluate:
        from models.training.evaluate.informer import evaluate_checkpoint

        evaluate_checkpoint(out)
    return record


if __name__ == "__main__":
    try:
        main()
    except DataError as exc:
        sys.exit(f"attnserve train: {exc}")
