"""Evaluate shipped Informer checkpoints on the ETTh1 test split with every attention backend.

For each checkpoint and backend (at its default options): MSE and MAE on the scaled data over all
test windows, beside the paper's multivariate ETTh1 numbers (Zhou et al. 2021, Table 2). Writes
``quality.json`` into each checkpoint folder (served by ``GET /models``; its ``slice`` entry is
what the tests reproduce) and the combined table to ``models/informer/RESULTS.md``.

    python -m models.informer.evaluate                      # every shipped checkpoint
    python -m models.informer.evaluate --models informer-etth1-h24 --backends probsparse full
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from models.attention import BACKENDS
from models.informer.checkpoint import shipped_dirs
from models.informer.data import WindowDataset, load_etth1, make_splits
from models.informer.forecaster import InformerForecaster
from models.informer.metrics import evaluate_loader
from models.informer.timefeatures import format_timestamps

RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"
# Zhou et al. 2021, Table 2 (multivariate ETTh1, Informer): horizon -> (MSE, MAE).
PAPER = {
    24: (0.577, 0.549),
    48: (0.685, 0.625),
    168: (0.931, 0.752),
    336: (1.128, 0.873),
    720: (1.215, 0.896),
}
SLICE_WINDOWS = 16  # test windows the tests re-run through the public forecaster API
TOLERANCE = 0.10  # other backends should stay within 10% of the trained backend's MSE
# Non-default settings also measured, to explain a miss at the defaults: Performer's default
# feature count int(d·ln d) is 44 at this model's head dimension 16.
EXTRA_RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "performer (num_features=128)": ("performer", {"num_features": 128}),
}


def slice_indices(n_windows: int, count: int = SLICE_WINDOWS) -> list[int]:
    """Evenly spaced test-window indices (first and last included)."""
    return np.linspace(0, n_windows - 1, count).round().astype(int).tolist()


def slice_mse(forecaster: InformerForecaster, backend: str, indices: list[int]) -> float:
    """MSE (scaled units) of the public ``prepare``/``predict`` path on the given test windows.

    Window ``i`` uses test-array rows ``[i, i+context)`` as history and the next ``horizon`` rows
    as the target, exactly as :class:`~models.informer.data.WindowDataset` does.
    """
    index, raw = load_etth1()
    start = 16 * 30 * 24 - forecaster.context  # test array begins seq_len rows early
    windows, targets = [], []
    for i in indices:
        a = start + i
        stamps = format_timestamps(index[a : a + forecaster.context])
        windows.append(forecaster.prepare(stamps, raw[a : a + forecaster.context].tolist()))
        b = a + forecaster.context
        targets.append(forecaster.scaler.transform(raw[b : b + forecaster.horizon]))
    preds = forecaster.predict(windows, backend=backend)
    pred = np.stack([forecaster.scaler.transform(np.asarray(p.values)) for p in preds])
    return float(np.mean((pred - np.stack(targets)) ** 2))


def evaluate_checkpoint(name: str, backends: list[str]) -> dict[str, Any]:
    """Full-test metrics per backend plus the fixed-slice MSEs, as stored in quality.json."""
    f = InformerForecaster.load(name)
    model, cfg = f.model, f.model.config
    splits, scaler = make_splits(cfg.seq_len, cfg.freq)
    if not np.allclose(scaler.mean, f.scaler.mean) or not np.allclose(scaler.std, f.scaler.std):
        raise RuntimeError(f"{name}: stored scaler differs from the one fit on the train split")
    test = WindowDataset(splits["test"], cfg.seq_len, cfg.label_len, cfg.pred_len)
    loader = DataLoader(test, batch_size=128)
    trained = f.meta.get("training", {}).get("backend", "probsparse")
    indices = slice_indices(len(test))
    old = f.quality.get("backends", {})
    results: dict[str, Any] = dict(old)
    slice_old = f.quality.get("slice", {}).get("mse", {})
    slice_res: dict[str, float] = dict(slice_old)
    for backend in backends:
        t0 = time.time()
        mse, mae = evaluate_loader(model, loader, backend)
        results[backend] = {
            "mse": round(mse, 6),
            "mae": round(mae, 6),
            "layers": f.layer_backends(backend),
        }
        slice_res[backend] = round(slice_mse(f, backend, indices), 6)
        print(
            f"{name} {backend:10s} MSE {mse:.4f} MAE {mae:.4f} ({time.time() - t0:.0f}s)",
            flush=True,
        )
    extra = dict(f.quality.get("extra", {}))
    for label, (backend, options) in EXTRA_RUNS.items():
        if backend in backends:
            mse, mae = evaluate_loader(model, loader, backend, options)
            extra[label] = {
                "backend": backend,
                "options": options,
                "mse": round(mse, 6),
                "mae": round(mae, 6),
            }
            print(f"{name} {label} MSE {mse:.4f} MAE {mae:.4f}", flush=True)
    paper = PAPER.get(cfg.pred_len)
    quality = {
        "dataset": "ETTh1 test split (rows 11520-14400, 12/4/4-month protocol), 7 channels",
        "metric_space": "scaled (train-split StandardScaler), averaged over all windows",
        "windows": len(test),
        "trained_backend": trained,
        "paper": {"mse": paper[0], "mae": paper[1]} if paper else None,
        "backends": results,
        "extra": extra,
        "slice": {
            "indices": indices,
            "mse": slice_res,
            "note": "public prepare/predict path on these test windows; tests reproduce it",
        },
    }
    (f.directory / "quality.json").write_text(json.dumps(quality, indent=2) + "\n")
    return quality


def results_table() -> str:
    """Markdown table over every shipped checkpoint's quality.json."""
    lines = [
        "| model | backend | test MSE | test MAE | paper MSE | paper MAE | MSE vs trained |",
        "|---|---|---|---|---|---|---|",
    ]
    for directory in shipped_dirs().values():
        name = directory.name
        path = directory / "quality.json"
        if not path.is_file():
            continue
        q = json.loads(path.read_text())
        ref = q["backends"].get(q["trained_backend"], {}).get("mse")
        paper = q.get("paper") or {"mse": None, "mae": None}
        rows = [(b, q["backends"].get(b)) for b in BACKENDS]
        rows += [(f"{k} ¹", v) for k, v in q.get("extra", {}).items()]
        for backend, r in rows:
            if r is None:
                continue
            ratio = f"{r['mse'] / ref - 1:+.1%}" if ref else "n/a"
            label = f"**{backend}** (trained)" if backend == q["trained_backend"] else backend
            lines.append(
                f"| {name} | {label} | {r['mse']:.3f} | {r['mae']:.3f} | "
                f"{paper['mse']} | {paper['mae']} | {ratio} |"
            )
    return "\n".join(lines)


NOTES = """
Notes:

- Layer plan: `probsparse` runs in both encoder self-attention layers and the masked decoder
  self-attention; the decoder cross-attention is exact, as in the paper. `nystrom` has no causal
  variant, so the decoder self-attention runs `full`; its encoder layer 1 (48 steps) and the
  cross-attention (48 keys) are at or under its 64 landmarks and so exact by construction.
- Performer misses the 10% bar. The trained Informer's attention is peaked (on a test window
  the scaled logits reach |q·k|/√d ≈ 14–30), where FAVOR+'s positive random-feature estimate of
  exp(q·k/√d) has a variance that grows with exp(‖q‖² + ‖k‖²) (Choromanski et al., ICLR 2021,
  Lemma 2): its per-row output was 70–90% off exact attention in every layer, and more features
  did not close the gap. The damage is largest in the cross-attention, hence at 168 steps.
  ¹ Not a default: 128 features instead of the default int(d·ln d) = 44 at head dimension 16.
- "MSE vs trained" compares with the backend the checkpoint was trained with (ProbSparse). The
  weights were trained with ProbSparse (paper protocol), then fine-tuned for up to two epochs on
  batches that drew ProbSparse or exact attention at random, which keeps the exact backends
  within 10% of ProbSparse (see each `config.json` → `training`).
"""


def write_results() -> str:
    table = results_table()
    text = (
        "# Informer on ETTh1 (multivariate, 7 channels): test results\n\n"
        "Written by `python -m models.informer.evaluate`. MSE/MAE on the scaled test split "
        "(train-split StandardScaler), every test window counted; paper numbers from Zhou et al. "
        "2021, Table 2 (Informer, multivariate ETTh1). Each backend runs at its default options "
        "on the same checkpoint; layers a backend cannot run use exact attention (see "
        "`quality.json` → `layers`).\n\n" + table + "\n" + NOTES
    )
    RESULTS_MD.write_text(text)
    return table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", default=None, help="checkpoint names (default: all)")
    p.add_argument("--backends", nargs="*", default=list(BACKENDS), help="backends to evaluate")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in args.models or list(shipped_dirs()):
        evaluate_checkpoint(name, args.backends)
    print(write_results())


if __name__ == "__main__":
    main()
