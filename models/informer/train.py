"""Train an Informer on ETTh1 (multivariate, 7 channels) and write a shipped checkpoint.

Protocol of Zhou et al. 2021 / Informer2020 ``exp/exp_informer.py``: 12/4/4-month split with the
scaler fit on train rows, MSE loss on scaled data, Adam, the learning rate halved after every
epoch (``utils/tools.py::adjust_learning_rate``, ``lradj='type1'``), early stopping on the
validation loss (patience 3), the best-validation weights kept. Fixed seeds. Never run in CI.

    python -m models.informer.train --horizon 24 --preset small --epochs 6
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from models.informer.checkpoint import (
    WEIGHTS_DIR,
    count_parameters,
    load_checkpoint,
    save_checkpoint,
)
from models.informer.config import PRESETS, preset
from models.informer.data import ETTH1_CHANNELS, WindowDataset, decoder_input, make_splits
from models.informer.metrics import evaluate_loader
from models.informer.model import Informer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--horizon", type=int, default=24, help="pred_len (default 24)")
    p.add_argument("--context", type=int, default=96, help="seq_len, rows of history (96)")
    p.add_argument("--label-len", type=int, default=48, help="decoder start-token length (48)")
    p.add_argument("--preset", default="small", choices=sorted(PRESETS), help="model size")
    p.add_argument(
        "--revin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reversible instance normalisation (default: the preset's setting)",
    )
    p.add_argument("--epochs", type=int, default=6, help="maximum epochs (paper: 6)")
    p.add_argument("--patience", type=int, default=3, help="early-stopping patience (paper: 3)")
    p.add_argument("--lr", type=float, default=5e-4, help="initial learning rate, halved per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--backend", default="probsparse", help="attention backend used in training")
    p.add_argument("--factor", type=int, default=5, help="ProbSparse factor c")
    p.add_argument("--seed", type=int, default=2021)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--mix-backends",
        nargs="*",
        default=[],
        help="extra backends: each training batch draws one of --backend and these (seeded), and "
        "the validation loss is their mean, so the weights serve every backend (not in the paper)",
    )
    p.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="start from this checkpoint folder (its architecture; fine-tuning stage)",
    )
    p.add_argument("--max-batches", type=int, default=0, help="cap batches per epoch (smoke runs)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="checkpoint folder (default models/weights/informer-etth1-h{horizon})",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    overrides = dict(
        seq_len=args.context, label_len=args.label_len, pred_len=args.horizon, factor=args.factor
    )
    if args.revin is not None:
        overrides["revin"] = args.revin
    config = preset(args.preset, **overrides)
    previous: dict = {}
    if args.init_from is not None:
        init_model, init_meta = load_checkpoint(args.init_from)
        config, previous = init_model.config, init_meta.get("training", {})
    out = args.out or WEIGHTS_DIR / f"informer-etth1-h{config.pred_len}"

    splits, scaler = make_splits(config.seq_len, config.freq)
    sets = {
        k: WindowDataset(s, config.seq_len, config.label_len, config.pred_len)
        for k, s in splits.items()
    }
    gen = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(sets["train"], args.batch_size, shuffle=True, generator=gen)
    val_loader = DataLoader(sets["val"], 256)
    test_loader = DataLoader(sets["test"], 256)

    model = Informer(config)
    if args.init_from is not None:
        model.load_state_dict(init_model.state_dict())
    backends = [args.backend, *args.mix_backends]
    draw = random.Random(args.seed)

    def validate() -> float:  # mean validation MSE over the training backends
        return sum(evaluate_loader(model, val_loader, b)[0] for b in backends) / len(backends)

    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    print(
        f"{out.name}: {count_parameters(model):,} parameters, windows "
        f"{ {k: len(v) for k, v in sets.items()} }, backend {args.backend}",
        flush=True,
    )

    best_val, best_state, best_epoch, bad_epochs, history = float("inf"), None, 0, 0, []
    start = time.time()
    if args.init_from is not None:  # the starting point competes too: never end up worse
        best_val, best_state = validate(), copy.deepcopy(model.state_dict())
        history.append({"epoch": 0, "val_mse": best_val})
        print(json.dumps(history[-1]), flush=True)
    for epoch in range(1, args.epochs + 1):
        for group in opt.param_groups:  # lradj type1: lr0 * 0.5^(epoch-1)
            group["lr"] = args.lr * 0.5 ** (epoch - 1)
        model.train()
        t0, total, n = time.time(), 0.0, 0
        for step, (x, xm, y, ym) in enumerate(train_loader):
            if args.max_batches and step >= args.max_batches:
                break
            backend = draw.choice(backends)
            pred = model(x, xm, decoder_input(y, config.label_len, config.pred_len), ym, backend)
            loss = torch.nn.functional.mse_loss(pred, y[:, -config.pred_len :])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + loss.item(), n + 1
        val_mse = validate()
        history.append(
            {
                "epoch": epoch,
                "train_mse": total / max(n, 1),
                "val_mse": val_mse,
                "seconds": round(time.time() - t0, 1),
            }
        )
        print(json.dumps(history[-1]), flush=True)
        if val_mse < best_val:
            best_val, best_epoch, bad_epochs = val_mse, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad_epochs += 1
            if bad_epochs >= args.patience:
                print(f"early stop after epoch {epoch}", flush=True)
                break
    assert best_state is not None
    model.load_state_dict(best_state)
    test_mse, test_mae = evaluate_loader(model, test_loader, args.backend)
    wall = time.time() - start
    record = {
        "command": "python -m models.informer.train " + " ".join(argv or sys.argv[1:]),
        "backend": args.backend,
        "mix_backends": args.mix_backends,
        "init_from": str(args.init_from) if args.init_from else None,
        "previous_stage": previous or None,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "best_epoch": best_epoch,
        "best_val_mse": best_val,
        "test_mse": test_mse,
        "test_mae": test_mae,
        "wall_seconds": round(wall, 1),
        "history": history,
        "parameters": count_parameters(model),
    }
    save_checkpoint(out, model, scaler, list(ETTH1_CHANNELS), record)
    print(
        f"saved {out}: best epoch {best_epoch}, val {best_val:.4f}, test MSE {test_mse:.4f} "
        f"MAE {test_mae:.4f}, {wall:.0f}s",
        flush=True,
    )
    return record


if __name__ == "__main__":
    main()
