"""What each forecasting lever buys: the same training recipe with one design choice changed at a
time, scored on the ETTh1 test split beside the closed-form linear baseline.

Each variant is trained with ``attnserve train`` into ``runs/ablation/h{H}-{variant}`` (resumable)
and scored with ``attnserve evaluate`` at the default backend; the table goes to
``benchmarks/results/forecast-ablation-etth1.md``.

    python -m benchmarks.forecast.ablation --horizon 24 --context 96
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness.report import RESULTS
from models.quality_file import backends_of
from models.training.informer_evaluate import evaluate_checkpoint
from models.training.informer_fit import STATE_FILE
from models.training.informer_train import main as train

OUT = RESULTS / "forecast-ablation-etth1.md"
# Variant -> (what changes, extra train flags on top of the ``patch`` preset), one lever at a
# time from the paper's tokens to the shipped recipe (whose calendar setting depends on context).
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "tokens-per-step": (
        "Informer tokens: one per step, channels mixed, calendar embedding; no linear path",
        ["--set", "patch_len=0", "channel_independent=false", "linear_path=false", "calendar=true"],
    ),
    "patches-mixed": (
        "patch tokens, channels mixed, no calendar; no linear path",
        ["--set", "channel_independent=false", "linear_path=false", "calendar=false"],
    ),
    "patches-independent": (
        "+ channel independence",
        ["--set", "linear_path=false", "calendar=false"],
    ),
    "linear-path": (
        "+ linear path the attention refines",
        ["--set", "calendar=false"],
    ),
    "linear-path-calendar": (
        "+ calendar embedding",
        ["--set", "calendar=true"],
    ),
    "linear-trained": (
        "+ calendar, linear path trained too (not frozen)",
        ["--set", "calendar=true", "--train-linear"],
    ),
}


def run(horizon: int, context: int, variants: list[str], epochs: int) -> list[dict]:
    rows = []
    for name in variants:
        what, extra = VARIANTS[name]
        out = Path("runs/ablation") / f"h{horizon}-c{context}-{name}"
        if not (out / "model.safetensors").is_file():
            resume = ["--resume"] if (out / STATE_FILE).is_file() else []
            train(
                [
                    "--data",
                    "data/ETT/ETTh1.csv",
                    "--split-preset",
                    "ett-hour",
                    "--context",
                    str(context),
                    "--horizon",
                    str(horizon),
                    "--preset",
                    "patch",
                    "--backend",
                    "flash",
                    "--epochs",
                    str(epochs),
                    "--patience",
                    "2",
                    "--lr",
                    "5e-4",
                    "--seed",
                    "2021",
                    "--out",
                    str(out),
                    "--no-evaluate",
                    *extra,
                    *resume,
                ]
            )
        q = evaluate_checkpoint(out, ["flash"])
        meta = json.loads((out / "config.json").read_text())
        rows.append(
            {
                "variant": name,
                "what": what,
                "mse": backends_of(q)["flash"]["mse"],
                "mae": backends_of(q)["flash"]["mae"],
                "linear_mse": q["linear_baseline"]["mse"],
                "best_epoch": meta["training"]["best_epoch"],
                "seconds": meta["training"]["wall_seconds"],
            }
        )
    return rows


def table(horizon: int, context: int, rows: list[dict]) -> str:
    lin = rows[0]["linear_mse"]
    lines = [
        f"### ETTh1, horizon {horizon}, context {context} (test MSE, all windows, `flash`)",
        "",
        "| variant | test MSE | test MAE | vs linear | best epoch | train s |",
        "|---|---:|---:|---:|---:|---:|",
        f"| *linear baseline (closed form)* | {lin:.4f} | — | — | — | — |",
    ]
    for r in rows:
        lines.append(
            f"| {r['what']} | {r['mse']:.4f} | {r['mae']:.4f} | {r['mse'] / lin - 1:+.1%} | "
            f"{r['best_epoch']} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--context", type=int, default=96)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = p.parse_args(argv)
    text = table(
        args.horizon, args.context, run(args.horizon, args.context, args.variants, args.epochs)
    )
    print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as f:
        f.write(
            text + "\n\nCommand: `python -m benchmarks.forecast.ablation --horizon "
            f"{args.horizon} --context {args.context}`\n\n"
        )


if __name__ == "__main__":
    main()
