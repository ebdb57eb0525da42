"""A user's transformers PatchTST through attnserve, per attention backend, beside the class run
by transformers itself (its ``sdpa`` and ``eager`` attention): latency of one batch and each
backend's speed-up over ``flash``, at the shipped model's context and at long contexts where
the approximations can pay.

    python -m benchmarks.forecast.hf                       # -> benchmarks/results/hf-forecast-cpu.md
    python -m benchmarks.forecast.hf --contexts 512 4096 --batch 8 --threads 2

The shipped ``patchtst-ettm1-h96-c512`` (trained here) is timed at its own context; longer
contexts use the same architecture with random weights (speed does not depend on the weights).
The error column is the forecast's relative distance to exact attention on the same inputs.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch

from benchmarks.harness.report import RESULTS
from benchmarks.host import cpu_model, load_average
from models.attention import BACKENDS
from models.hf_forecast.bridge import backend_scope
from models.hf_forecast.folder import shipped_folders
from models.hf_forecast.forecaster import HFForecaster

OUT = RESULTS / "hf-forecast-cpu.md"
SHIPPED = "patchtst-ettm1-h96-c512"


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def model_at(context: int):
    """The shipped model at its context, else the same architecture at ``context``."""
    from transformers import PatchTSTForPrediction

    folder = shipped_folders()[SHIPPED]
    forecaster = HFForecaster.load(folder)
    if context == forecaster.context:
        return forecaster.model, forecaster, "trained (ETTm1)"
    config = forecaster.model.config
    config.context_length = context
    torch.manual_seed(0)
    model = PatchTSTForPrediction(config).eval()
    return model, None, "random weights"


def measure(
    context: int, batch: int, repeats: int
) -> tuple[list[tuple[str, float, float]], int, str]:
    """``(run by, ms per batch, error vs exact)`` rows for one context, its patches, weights."""
    from transformers import PatchTSTForPrediction

    from models.hf_forecast.bridge import use_bridge

    model, _, weights = model_at(context)
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
            ms = timed(lambda ref=ref: ref(past_values=x), repeats)
        rows.append((f"transformers ({impl})", ms, 0.0))
    use_bridge(model)
    for backend in BACKENDS:

        def run(backend: str = backend) -> torch.Tensor:
            with torch.inference_mode(), backend_scope(backend):
                return model(past_values=x).prediction_outputs

        error = float((run() - exact).abs().max() / exact.abs().max())
        rows.append((f"attnserve {backend}", timed(run, repeats), error))
    return rows, model.model.patchifier.num_patches, weights


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    lines = [
        "# A transformers PatchTST through attnserve, per backend (CPU)",
        "",
        f"`python -m benchmarks.forecast.hf --contexts {' '.join(map(str, args.contexts))} "
        f"--batch {args.batch} --threads {args.threads}`; {cpu_model()}, {args.threads} torch "
        f"threads, load {load_average()} at the start; median of {args.repeats} after a warm-up; "
        f"one batch of {args.batch} histories x 7 channels. Error: max |forecast - exact| / "
        "max |exact| on the same inputs.",
        "",
        "| context | patches | weights | run by | ms / batch | vs flash | error vs exact |",
        "|---:|---:|---|---|---:|---:|---:|",
    ]
    for context in args.contexts:
        rows, patches, weights = measure(context, args.batch, args.repeats)
        flash = next(ms for name, ms, _ in rows if name == "attnserve flash")
        for name, ms, error in rows:
            # A random PatchTST's forecast barely depends on attention: no error figure there.
            shown = f"{error:.1e}" if weights.startswith("trained") else "—"
            lines.append(
                f"| {context} | {patches} | {weights} | {name} | {ms:.1f} | "
                f"{flash / ms:.2f}x | {shown} |"
            )
        print("\n".join(lines[-len(rows) :]), flush=True)
    text = "\n".join(lines) + "\n"
    OUT.write_text(text)
    return text


if __name__ == "__main__":
    print(main())
