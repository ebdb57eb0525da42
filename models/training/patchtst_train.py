"""Train a Hugging Face ``PatchTSTForPrediction`` on a CSV and save it as a ``save_pretrained``
folder that ``attnserve serve`` takes like any user's (the same loader, no special case).

PatchTST: Nie et al., "A Time Series is Worth 64 Words: Long-term Forecasting with
Transformers", ICLR 2023 — channel-independent patches of the history as tokens, per-window
instance normalisation (the class's ``scaling="std"``), a flattening linear head. The network is
transformers' own class; the loop is ours (transformers' ``Trainer`` would add ``accelerate``
for a plain Adam loop).

The model reads histories in original units and scales each window itself, so it is served on
raw values. The loss is the MSE in the train split's standardised units (each channel's error
divided by its train standard deviation), which weighs the channels equally and is the metric
``attnserve evaluate`` reports beside the linear baseline. Every epoch's order is derived from
the seed, and each epoch ends with a resumable state in ``--out`` (``--resume``).

    python -m models.training.patchtst_train --out runs/patchtst-ettm1-h96-c512

The defaults are the shipped ``patchtst-ettm1-h96-c512``'s recipe (ETTm1, context 512, horizon
96, patches of 16 without overlap, width 64, dropout 0.3): the flattening head over 32 patches
overfits less than over 63 overlapping ones, which beat the linear baseline on validation but
not on test (``docs/performance/transformers-forecasters.md``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from models.hf_forecast.folder import SIDECAR, write_sidecar
from models.training.data.csv_file import DataError
from models.training.data.ett import data_dir
from models.training.data.source import add_data_arguments, source_from_args

STATE_FILE = "train_state.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m models.training.patchtst_train",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    add_data_arguments(p, data_help="CSV file (default: shipped ETTm1, preset ett-minute)")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--horizon", type=int, default=96)
    p.add_argument("--patch-length", type=int, default=16)
    p.add_argument("--patch-stride", type=int, default=16)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument(
        "--pooling",
        choices=["flatten", "mean", "max"],
        default="flatten",
        help="how the head reads the patch embeddings: flatten (the paper's head: every "
        "patch's embedding into one linear map) or pooled (transformers' default, mean)",
    )
    p.add_argument("--head-dropout", type=float, default=0.3)
    p.add_argument("--ff-dropout", type=float, default=0.3)
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--epochs", type=int, default=14)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument(
        "--windows-per-epoch",
        type=int,
        default=8192,
        help="training windows drawn per epoch (seeded; 0: all). Neighbouring windows of a "
        "15-minute series overlap almost entirely, so a sample per epoch covers the split",
    )
    p.add_argument("--val-stride", type=int, default=8, help="validate on every k-th window")
    p.add_argument("--patience", type=int, default=4)
    p.add_argument("--seed", type=int, default=2023)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--resume", action="store_true")
    return p.parse_args(argv)


def windows(values: np.ndarray, start: int, end: int, context: int, horizon: int) -> np.ndarray:
    """Start rows of every window whose history ends in ``[start, end)`` and target fits."""
    first = max(start, context)
    last = min(end, len(values)) - horizon
    return np.arange(first - context, last - context + 1)


def batch(values: torch.Tensor, starts: np.ndarray, context: int, horizon: int):
    """History ``[b, context, c]`` and target ``[b, horizon, c]`` for window starts."""
    index = torch.from_numpy(starts)[:, None] + torch.arange(context + horizon)[None]
    rows = values[index]
    return rows[:, :context], rows[:, context:]


def scaled_mse(pred: torch.Tensor, target: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (((pred - target) / std) ** 2).mean()


@torch.no_grad()
def validate(model, values, starts, std, context, horizon) -> float:
    model.eval()
    total, count = 0.0, 0
    for s in range(0, len(starts), 256):
        x, y = batch(values, starts[s : s + 256], context, horizon)
        pred = model(past_values=x).prediction_outputs
        total += float(scaled_mse(pred, y, std)) * len(x)
        count += len(x)
    return total / count


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from transformers import PatchTSTConfig, PatchTSTForPrediction

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.data is None and args.split_ratios is None and args.split_borders is None:
        args.split_preset = args.split_preset or "ett-minute"
    try:
        path = args.data or data_dir() / "ETT" / "ETTm1.csv"
        source, table = source_from_args(args, path, args.context, args.horizon)
    except DataError as exc:
        raise SystemExit(f"train_patchtst: {exc}") from None
    borders = source.borders
    values = torch.from_numpy(table.values.astype(np.float32))
    lo, hi = borders["train"]
    std = torch.from_numpy(table.values[lo:hi].std(axis=0).astype(np.float32))
    train_starts = windows(table.values, lo, hi, args.context, args.horizon)
    val_starts = windows(table.values, *borders["val"], args.context, args.horizon)
    val_starts = val_starts[:: args.val_stride]

    config = PatchTSTConfig(
        num_input_channels=len(table.channels),
        context_length=args.context,
        prediction_length=args.horizon,
        patch_length=args.patch_length,
        patch_stride=args.patch_stride,
        d_model=args.d_model,
        num_attention_heads=args.heads,
        num_hidden_layers=args.layers,
        ffn_dim=args.ffn,
        head_dropout=args.head_dropout,
        ff_dropout=args.ff_dropout,
        attention_dropout=args.attention_dropout,
        scaling="std",
        loss="mse",
        pooling_type=None if args.pooling == "flatten" else args.pooling,
    )
    torch.manual_seed(args.seed)
    model = PatchTSTForPrediction(config)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    state_path = args.out / STATE_FILE
    state: dict[str, Any] = {"epoch": 0, "best_val": float("inf"), "bad": 0, "history": []}
    if args.resume:
        if not state_path.is_file():
            raise SystemExit(f"train_patchtst: --resume but no {state_path}")
        saved = torch.load(state_path, weights_only=False)
        model.load_state_dict(saved.pop("model"))
        opt.load_state_dict(saved.pop("optimizer"))
        state = saved
        print(f"resuming after epoch {state['epoch']}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    parameters = sum(p.numel() for p in model.parameters())
    print(
        f"PatchTST {parameters:,} parameters; train windows {len(train_starts)}, "
        f"val windows {len(val_starts)}",
        flush=True,
    )
    steps_total = args.epochs * max(
        1, (args.windows_per_epoch or len(train_starts)) // args.batch_size
    )
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=args.lr, total_steps=steps_total, pct_start=0.2
    )
    if args.resume and "scheduler" in state:
        schedule.load_state_dict(state.pop("scheduler"))
    for epoch in range(state["epoch"] + 1, args.epochs + 1):
        t0 = time.time()
        rng = np.random.default_rng(args.seed * 1000 + epoch)
        order = rng.permutation(train_starts)
        if args.windows_per_epoch:
            order = order[: args.windows_per_epoch]
        model.train()
        total, n = 0.0, 0
        bar = tqdm(range(0, len(order) - args.batch_size + 1, args.batch_size), leave=False)
        for s in bar:
            x, y = batch(values, order[s : s + args.batch_size], args.context, args.horizon)
            loss = scaled_mse(model(past_values=x).prediction_outputs, y, std)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if schedule.last_epoch + 1 < steps_total:
                schedule.step()
            total, n = total + loss.item(), n + 1
            bar.set_postfix(loss=f"{total / n:.4f}")
        val = validate(model, values, val_starts, std, args.context, args.horizon)
        seconds = time.time() - t0
        state["history"].append(
            {
                "epoch": epoch,
                "train_mse": round(total / max(n, 1), 5),
                "val_mse": round(val, 5),
                "seconds": round(seconds),
            }
        )
        print(
            f"epoch {epoch}: train {total / max(n, 1):.4f} val {val:.4f} ({seconds:.0f}s)",
            flush=True,
        )
        if val < state["best_val"]:
            state.update(best_val=val, best_epoch=epoch, bad=0)
            model.save_pretrained(args.out)  # the best weights so far, servable as they are
        else:
            state["bad"] += 1
        state["epoch"] = epoch
        torch.save(
            {
                **state,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": schedule.state_dict(),
            },
            state_path,
        )
        if state["bad"] >= args.patience:
            print(f"early stop: no better validation for {args.patience} epochs", flush=True)
            break
    command = "python -m models.training.patchtst_train " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    record = {
        "command": command,
        "best_epoch": state["best_epoch"],
        "best_val_mse": round(state["best_val"], 5),
        "history": state["history"],
        "parameters": parameters,
    }
    write_sidecar(
        args.out,
        channels=list(table.channels),
        freq=table.freq,
        data=source.to_dict(),
        training=record,
    )
    print(f"saved {args.out} ({SIDECAR}): best epoch {state['best_epoch']}", flush=True)
    print(json.dumps(record["history"]))
    return record


if __name__ == "__main__":
    main()
