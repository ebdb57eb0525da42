"""The Informer training loop behind ``attnserve train`` (:mod:`models.training.informer_train`).

Protocol after Zhou et al. 2021 / Informer2020 ``exp/exp_informer.py``: MSE loss on scaled data,
Adam, the learning rate multiplied by ``--lr-decay`` after every epoch (``lradj='type1'`` at the
default 0.5), early stopping on the validation loss with epoch 0 (the starting point) competing,
the best-validation weights kept. Every epoch's order is derived from the seed and the epoch
number, and each epoch ends with a state file in ``--out``, so ``--resume`` continues the very
run that stopped.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm import tqdm

from models.informer.checkpoint import count_parameters
from models.informer.model import Informer
from models.training.data.ett import WindowDataset, decoder_input
from models.training.evaluate.metrics import evaluate_loader

# Per-epoch state for --resume (also after a finished run, to train on for more epochs); never
# served or shipped.
STATE_FILE = "train_state.pt"


def fit_model(
    model: Informer,
    sets: dict[str, WindowDataset],
    backends: list[str],
    args: argparse.Namespace,
    out: Path,
) -> dict[str, Any]:
    """Train with early stopping; leaves the best-validation weights in ``model``."""
    c = model.config
    val_set: Dataset = sets["val"]
    if args.val_stride > 1:
        val_set = Subset(sets["val"], range(0, len(sets["val"]), args.val_stride))
    val_loader = DataLoader(val_set, 256)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=args.lr)

    def validate() -> float:  # mean validation MSE over the training backends
        return sum(evaluate_loader(model, val_loader, b)[0] for b in backends) / len(backends)

    state: dict[str, Any] = {"epoch": 0, "bad_epochs": 0, "history": [], "seconds": 0.0}
    state_path = out / STATE_FILE
    if args.resume and state_path.is_file():
        state = torch.load(state_path, weights_only=True)
        model.load_state_dict(state.pop("model"))
        opt.load_state_dict(state.pop("optimizer"))
        print(f"resuming after epoch {state['epoch']} from {state_path}", flush=True)
    elif args.resume:
        raise SystemExit(f"attnserve train: --resume but no {state_path}; start without it")
    else:  # epoch 0 competes too: the starting point (the linear baseline) is never lost
        state["best_val"] = validate()
        state["best_state"] = {k: v.clone() for k, v in model.state_dict().items()}
        state["best_epoch"] = 0
        state["start_state"] = state["best_state"]
        state["history"].append({"epoch": 0, "val_mse": state["best_val"]})
    print(
        f"{out.name}: {count_parameters(model):,} parameters, windows "
        f"{ {k: len(v) for k, v in sets.items()} }, backends {backends}, "
        f"start val {state['history'][0]['val_mse']:.4f}",
        flush=True,
    )
    epochs = tqdm(
        range(state["epoch"] + 1, args.epochs + 1),
        desc="epochs",
        unit="epoch",
        initial=state["epoch"],
        total=args.epochs,
        disable=None,
    )
    for epoch in epochs:
        t0 = time.time()
        for group in opt.param_groups:  # lradj type1 at the default decay: lr0 * 0.5^(epoch-1)
            group["lr"] = args.lr * args.lr_decay ** (epoch - 1)
        gen = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        draw = random.Random(args.seed * 1000 + epoch)
        loader = DataLoader(sets["train"], args.batch_size, shuffle=True, generator=gen)
        steps = min(len(loader), args.max_batches or len(loader))
        model.train()
        total, n = 0.0, 0
        batches = tqdm(loader, total=steps, desc=f"epoch {epoch}", leave=False, disable=None)
        for step, (x, xm, y, ym) in enumerate(batches):
            if step >= steps:
                break
            pred = model(
                x, xm, decoder_input(y, c.label_len, c.pred_len), ym, draw.choice(backends)
            )
            loss = torch.nn.functional.mse_loss(pred, y[:, -c.pred_len :])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + loss.item(), n + 1
            batches.set_postfix(loss=f"{total / n:.4f}")
        val = validate()
        improved = val < state["best_val"]
        if improved:
            state.update(best_val=val, best_epoch=epoch, bad_epochs=0)
            state["best_state"] = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            state["bad_epochs"] += 1
        seconds = time.time() - t0
        state["seconds"] += seconds
        state["epoch"] = epoch
        remaining = args.epochs - epoch
        state["history"].append(
            {
                "epoch": epoch,
                "train_mse": total / max(n, 1),
                "val_mse": val,
                "seconds": round(seconds, 1),
            }
        )
        epochs.set_postfix(val=f"{val:.4f}", best=f"{state['best_val']:.4f}")
        eta = remaining * state["seconds"] / (epoch - state["history"][0]["epoch"] or 1)
        print(
            json.dumps(
                {
                    **state["history"][-1],
                    "best_val_mse": state["best_val"],
                    "eta_max_seconds": round(eta),
                }
            ),
            flush=True,
        )
        stop = state["bad_epochs"] >= args.patience
        out.mkdir(parents=True, exist_ok=True)
        torch.save(
            {**state, "model": model.state_dict(), "optimizer": opt.state_dict()}, state_path
        )
        if stop:
            print(
                f"early stop after epoch {epoch}: no better validation in {args.patience}",
                flush=True,
            )
            break
    start_val = state["history"][0]["val_mse"]
    kept_start = (
        model.linear is not None
        and state["best_epoch"] > 0
        and state["best_val"] > start_val * (1 - args.min_gain)
    )
    if kept_start:  # (recorded as kept_linear_start, with best_epoch 0)
        # A gain this small on one validation split is noise (it did not carry over to the
        # test split when we tried): keep the linear starting point instead.
        print(
            f"keeping the linear starting point: the best epoch ({state['best_epoch']}) lowers "
            f"validation MSE {start_val:.4f} by less than {args.min_gain:.1%}",
            flush=True,
        )
        state.update(best_state=state["start_state"], best_epoch=0, best_val=start_val)
    model.load_state_dict(state["best_state"])
    model.eval()
    return {
        "backend": backends[0],
        "mix_backends": backends[1:],
        "train_linear": args.train_linear,
        "min_gain": args.min_gain,
        "kept_linear_start": model.linear is not None and state["best_epoch"] == 0,
        "lr": args.lr,
        "lr_decay": args.lr_decay,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "best_epoch": state["best_epoch"],
        "best_val_mse": state["best_val"],
        "wall_seconds": round(state["seconds"], 1),
        "history": state["history"],
    }
