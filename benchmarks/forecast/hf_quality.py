"""The quality table of the transformers PatchTST trained here, beside the closed-form linear
baseline at its context and our shipped Informer at the same horizon (ETTm1, horizon 96), read
from the models' ``quality.json`` files (written by ``attnserve evaluate``).

    attnserve evaluate models/weights/patchtst-ettm1-h96-c512     # refresh its quality.json
    python -m benchmarks.forecast.hf_quality                      # -> benchmarks/results/patchtst-ettm1-quality.md

It only reads files, so ``--smoke`` is the same run (written to the scratch folder).
"""

from __future__ import annotations

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report
from models.hf_forecast.folder import read_sidecar, shipped_folders
from models.informer.checkpoint import shipped_dirs
from models.quality_file import backends_of, read_quality

PATCHTST = "patchtst-ettm1-h96-c512"
INFORMER = "informer-ettm1-h96-c2048"


def _rows(name: str, quality: dict) -> list[list[str]]:
    """The linear baseline's row, then each backend's, best MSE first."""
    linear = quality["linear_baseline"]["mse"]
    rows = [
        ["*linear baseline* (closed form)", quality["context"], f"all {quality['windows']}",
         f"{linear:.4f}", f"{quality['linear_baseline']['mae']:.4f}", "—"]
    ]  # fmt: skip
    for backend, entry in sorted(backends_of(quality).items(), key=lambda kv: kv[1]["mse"]):
        base = entry.get("linear_mse", linear)
        windows = "all" if entry["stride"] == 1 else f"every {entry['stride']}th"
        rows.append(
            [f"{name}, `{backend}`", quality["context"], f"{windows} {entry['windows']}",
             f"{entry['mse']:.4f}", f"{entry['mae']:.4f}", f"{entry['mse'] / base - 1:+.1%}"]
        )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> str:
    args = cli.parse(cli.parser(__doc__, cli.out(RESULTS / "patchtst-ettm1-quality.md")), argv)
    report = Report("benchmarks.forecast.hf_quality", argv)
    patchtst = read_quality(shipped_folders()[PATCHTST] / "quality.json")
    informer = read_quality(shipped_dirs()[INFORMER] / "quality.json")
    training = read_sidecar(shipped_folders()[PATCHTST]).training
    report.add(
        f"ETTm1, all 7 channels, test rows {patchtst['dataset'].split('test rows ')[1]}; MSE/MAE "
        "in the train split's standardised units; horizon 96. `vs linear`: against the "
        "closed-form NLinear-style ridge map at the same context, on the same windows. "
        f"Trained with `{training.get('command', '?')}` (best epoch {training.get('best_epoch')}, "
        f"{training.get('parameters', '?'):,} parameters)."
    )
    report.table(
        ["model, backend", "context", "test windows", "MSE", "MAE", "vs linear"],
        [*_rows(PATCHTST, patchtst), *_rows(INFORMER, informer)],
        "lrrrrr",
    )
    title = "PatchTST (transformers) trained here, beside the linear baseline and our Informer"
    return report.write(args.out, title)


if __name__ == "__main__":
    main()
