"""A user's transformers PatchTST through attnserve, per attention backend, beside the class run
by transformers itself (its ``sdpa`` and ``eager`` attention): latency of one batch and each
backend's speed-up over ``flash``, at the shipped model's context and at long contexts where
the approximations can pay.

    python -m benchmarks.forecast.hf                       # -> benchmarks/results/hf-forecast-cpu.md
    python -m benchmarks.forecast.hf --contexts 512 4096 --batch 8 --threads 2

The shipped ``patchtst-ettm1-h96-c512`` (trained here) is timed at its own context; longer
contexts use the same architecture with random weights (speed does not depend on the weights).
The error column is the forecast's relative distance to exact attention on the same inputs.
``--smoke``: context 512, batch 1, 1 repeat.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import numpy as np
import torch

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.timing import median_ms
from models.attention import BACKENDS
from models.hf_forecast.bridge import backend_scope
from models.hf_forecast.folder import shipped_folders
from models.hf_forecast.forecaster import HFForecaster

SHIPPED = "patchtst-ettm1-h96-c512"


def model_at(context: int) -> tuple[Any, str]:
    """The shipped model at its context, else the same architecture at ``context`` with random
    weights; and which weights it has."""
    from transformers import PatchTSTForPrediction

    forecaster = HFForecaster.load(shipped_folders()[SHIPPED])
    if context == forecaster.context:
        return forecaster.model, "trained (ETTm1)"
    config = forecaster.model.config
    config.context_length = context
    torch.manual_seed(0)
    return PatchTSTForPrediction(config).eval(), "random weights"


def measure(
    context: int, batch: int, repeats: int
) -> tuple[list[tuple[str, float, float]], int, str]:
    """``(run by, ms per batch, error vs exact)`` rows for one context, its patches, weights."""
    from transformers import PatchTSTForPrediction

    from models.hf_forecast.bridge import use_bridge

    model, weights = model_at(context)
    rng = np.random.default_rng(0)
    x = torch.tensor(
        10 + np.cumsum(rng.normal(size=(batch, context, 7)), axis=1), dtype=torch.float32
    )
    rows: list[tuple[str, float, float]] = []
    for impl in ("sdpa", "eager"):  # the class as transformers runs it, same weights
        config = copy.deepcopy(model.config)
        config._attn_implementation = impl
        ref = PatchTSTForPrediction(config).eval()
        ref.load_state_dict(model.state_dict())
        with torch.inference_mode():
            exact = ref(past_values=x).prediction_outputs
            ms = median_ms(partial(ref, past_values=x), repeats)
        rows.append((f"transformers ({impl})", ms, 0.0))
    use_bridge(model)
    for backend in BACKENDS:

        def run(backend: str = backend) -> torch.Tensor:
            with torch.inference_mode(), backend_scope(backend):
                return model(past_values=x).prediction_outputs

        error = float((run() - exact).abs().max() / exact.abs().max())
        rows.append((f"attnserve {backend}", median_ms(run, repeats), error))
    return rows, model.model.patchifier.num_patches, weights


def main(argv: list[str] | None = None) -> str:
    p = cli.parser(
        __doc__,
        cli.sizes("--contexts", [512, 2048, 8192]),
        cli.threads(2),
        cli.repeats(5),
        cli.out(RESULTS / "hf-forecast-cpu.md"),
    )
    p.add_argument("--batch", type=int, default=8)
    args = cli.parse(p, argv, contexts=[512], batch=1, repeats=1)
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.forecast.hf", argv)
    report.add(
        f"{args.threads} torch threads; median of {args.repeats} after a warm-up; one batch of "
        f"{args.batch} histories x 7 channels. Error: max |forecast - exact| / max |exact| on "
        "the same inputs."
    )
    cells = []
    for context in args.contexts:
        rows, patches, weights = measure(context, args.batch, args.repeats)
        flash = next(ms for name, ms, _ in rows if name == "attnserve flash")
        for name, ms, error in rows:
            # A random PatchTST's forecast barely depends on attention: no error figure there.
            shown = f"{error:.1e}" if weights.startswith("trained") else "—"
            cells.append(
                [context, patches, weights, name, f"{ms:.1f}", f"{flash / ms:.2f}x", shown]
            )
            print(" | ".join(map(str, cells[-1])), flush=True)
    report.table(
        ["context", "patches", "weights", "run by", "ms / batch", "vs flash", "error vs exact"],
        cells,
        "rrllrrr",
    )
    return report.write(args.out, "A transformers PatchTST through attnserve, per backend (CPU)")


if __name__ == "__main__":
    main()
