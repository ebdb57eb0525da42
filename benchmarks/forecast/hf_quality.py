"""The quality table of the transformers PatchTST trained here, beside the closed-form linear
baseline at its context and our shipped Informer at the same horizon (ETTm1, horizon 96), read
from the models' ``quality.json`` files (written by ``attnserve evaluate``).

    attnserve evaluate models/weights/patchtst-ettm1-h96-c512     # refresh its quality.json
    python -m benchmarks.forecast.hf_quality                      # -> benchmarks/results/patchtst-ettm1-quality.md
"""

from __future__ import annotations

from benchmarks.harness.report import RESULTS
from models.hf_forecast.folder import read_sidecar, shipped_folders
from models.informer.checkpoint import shipped_dirs
from models.quality_file import backends_of, read_quality

OUT = RESULTS / "patchtst-ettm1-quality.md"
PATCHTST = "patchtst-ettm1-h96-c512"
INFORMER = "informer-ettm1-h96-c2048"


def _rows(name: str, quality: dict) -> list[str]:
    linear = quality["linear_baseline"]["mse"]
    rows = [
        f"| *linear baseline* (closed form) | {quality['context']} | all {quality['windows']} | "
        f"{linear:.4f} | {quality['linear_baseline']['mae']:.4f} | — |"
    ]
    for backend, entry in sorted(backends_of(quality).items(), key=lambda kv: kv[1]["mse"]):
        base = entry.get("linear_mse", linear)
        windows = "all" if entry["stride"] == 1 else f"every {entry['stride']}th"
        rows.append(
            f"| {name}, `{backend}` | {quality['context']} | {windows} {entry['windows']} | "
            f"{entry['mse']:.4f} | {entry['mae']:.4f} | {entry['mse'] / base - 1:+.1%} |"
        )
    return rows


def main() -> str:
    patchtst = read_quality(shipped_folders()[PATCHTST] / "quality.json")
    informer = read_quality(shipped_dirs()[INFORMER] / "quality.json")
    training = read_sidecar(shipped_folders()[PATCHTST]).training
    lines = [
        "# PatchTST (transformers) trained here, beside the linear baseline and our Informer",
        "",
        f"ETTm1, all 7 channels, test rows {patchtst['dataset'].split('test rows ')[1]}; MSE/MAE "
        "in the train split's standardised units; horizon 96. `vs linear`: against the "
        "closed-form NLinear-style ridge map at the same context, on the same windows. "
        f"Trained with `{training.get('command', '?')}` (best epoch {training.get('best_epoch')}, "
        f"{training.get('parameters', '?'):,} parameters).",
        "",
        "| model, backend | context | test windows | MSE | MAE | vs linear |",
        "|---|---:|---:|---:|---:|---:|",
        *_rows(PATCHTST, patchtst),
        *_rows(INFORMER, informer),
        "",
    ]
    text = "\n".join(lines)
    OUT.write_text(text)
    return text


if __name__ == "__main__":
    print(main())
