"""What each forecasting lever buys: the same training recipe with one design choice changed at a
time, scored on the ETTh1 test split beside the closed-form linear baseline.

Each variant is trained with ``attnserve train`` into ``runs/ablation/h{H}-{variant}`` (resumable)
and scored with ``attnserve evaluate`` at the default backend; the table is appended to
``benchmarks/results/forecast-ablation-etth1.md``.

    python -m benchmarks.forecast.ablation --horizon 24 --context 96
    python -m benchmarks.forecast.ablation --smoke   # one variant, one epoch, in a scratch folder
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report, destination
from models.quality_file import backends_of
from models.training.evaluate.informer import evaluate_checkpoint
from models.training.informer_fit import STATE_FILE
from models.training.informer_train import main as train

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


def run(horizon: int, context: int, variants: list[str], epochs: int, runs: Path) -> list[dict]:
    """Train (or resume) and score each variant; one row each."""
    rows = []
    for name in variants:
        what, extra = VARIANTS[name]
        out = runs / f"h{horizon}-c{context}-{name}"
        if not (out / "model.safetensors").is_file():
            resume = ["--resume"] if (out / STATE_FILE).is_file() else []
            # The recipe every variant shares; ``extra`` changes its one lever.
            recipe = (
                f"--data data/ETT/ETTh1.csv --split-preset ett-hour --context {context} "
                f"--horizon {horizon} --preset patch --backend flash --epochs {epochs} "
                "--patience 2 --lr 5e-4 --seed 2021"
            )
            train([*recipe.split(), "--out", str(out), "--no-evaluate", *extra, *resume])
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


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.out(RESULTS / "forecast-ablation-etth1.md"))
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--context", type=int, default=96)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--runs", type=Path, default=Path("runs/ablation"), help="checkpoints go here")
    scratch = Path(tempfile.gettempdir()) / "attnserve-ablation-smoke"
    args = cli.parse(p, argv, epochs=1, variants=["linear-path"], runs=scratch)
    report = Report("benchmarks.forecast.ablation", argv)
    rows = run(args.horizon, args.context, args.variants, args.epochs, args.runs)
    lin = rows[0]["linear_mse"]
    report.add(
        f"### ETTh1, horizon {args.horizon}, context {args.context} (test MSE, all windows, `flash`)"
    )
    report.table(
        ["variant", "test MSE", "test MAE", "vs linear", "best epoch", "train s"],
        [["*linear baseline (closed form)*", f"{lin:.4f}", "—", "—", "—", "—"]]
        + [
            [r["what"], f"{r['mse']:.4f}", f"{r['mae']:.4f}", f"{r['mse'] / lin - 1:+.1%}",
             r["best_epoch"], f"{r['seconds']:.0f}"]
            for r in rows
        ],
        "lrrrrr",
    )  # fmt: skip
    out = destination(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:  # one section per horizon and context, kept across runs
        f.write(report.text() + "\n")
    print(report.text())


if __name__ == "__main__":
    main()
