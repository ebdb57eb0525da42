"""Estimated against measured seconds of a forward pass: how far the per-request compute bound
(``max_request_compute_s``, :mod:`service.engine.batching.cost`) can be trusted.

    python -m benchmarks.attention.cost_model                       # MiniLM + the long ETTm1 forecaster
    python -m benchmarks.attention.cost_model --models informer-etth1-h24 --threads 2

Each model is loaded as the server loads it, warmed up and calibrated exactly as the worker does
at start-up (one calibration batch per backend at default options), then every (call, rows,
length) of a grid runs through the servable's ``run`` and its best time is set beside the
estimate. Calls whose estimate is over ``--max-seconds`` are estimated only (they are what the
bound refuses). The ratio column is estimated / measured: above 1 the bound is conservative.
Writes ``benchmarks/results/cost-model-<device>.{md,json}``. ``--smoke``: informer-etth1-h24,
calls estimated over 0.2 s left unrun.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.timing import best_seconds
from models.names import TEXT_MODEL
from service.engine.batching.cost import CostModel, measure_backend
from service.engine.batching.device import DeviceRuntime, select_device
from service.engine.registry import load_servables
from service.engine.servables.base import Call, ServedModel
from service.settings import Settings

TEXT_GRID = [(1, 32), (8, 128), (32, 128), (16, 256), (64, 256)]
FORECAST_ROWS = [1, 4, 16]
# Non-default options worth pricing: the ones a request can turn up (or down) the most.
OPTIONS: dict[str, list[dict[str, Any]]] = {
    "performer": [{"num_features": 1024}, {"num_features": 4096}],
    "nystrom": [{"num_landmarks": 256}],
    "probsparse": [{"factor": 20}],
}


def calls(model: ServedModel) -> list[Call]:
    """Every served backend at default options, plus the option variants of :data:`OPTIONS`."""
    out = []
    for backend in model.backends():
        default = model.default_call(backend)
        out.append(default)
        for extra in OPTIONS.get(backend, []):
            options = tuple(sorted({**default.options_dict, **extra}.items()))
            out.append(type(default)(backend, options))  # a Call, or a TextCall at its defaults
    return out


def rows_for(model: ServedModel, rows: int, length: int) -> list[Any]:
    """``rows`` inputs of ``length`` tokens (text) or the model's context (forecasts)."""
    sample, _, _ = model.calibration_batch(model.default_attention)
    if model.task == "encode":
        ids = model.tokenize(["the quick brown fox jumps over the lazy dog " * 40])[0]  # type: ignore[attr-defined]
        return [ids[:length]] * rows
    return [sample[0]] * rows


def measure(model: ServedModel, runtime: DeviceRuntime, args: argparse.Namespace) -> list[dict]:
    """Calibrate as the worker does, then estimate and time every call over the grid."""
    cost = CostModel()
    for backend in model.backends():
        for rows, call in model.warmup_batches(backend):
            with runtime.inference(backend):
                model.run(rows, call)
        measure_backend(cost, model, backend, runtime.inference)
    grid = (
        TEXT_GRID
        if model.task == "encode"
        else [(r, model.calibration_batch(model.default_attention)[2]) for r in FORECAST_ROWS]
    )
    out = []
    for call in calls(model):
        for n, length in grid:
            estimate = cost.seconds(call.backend, model.work_estimate(call, n, length))
            assert estimate is not None
            row = {
                "model": model.name,
                "backend": call.backend,
                "options": ", ".join(f"{k}={v}" for k, v in call.options) or "-",
                "rows": n,
                "length": length,
                "estimated_s": estimate,
                "measured_s": None,
            }
            if estimate <= args.max_seconds:
                inputs = rows_for(model, n, length)

                def run(inputs: list[Any] = inputs, call: Call = call) -> None:
                    with runtime.inference(call.backend):
                        model.run(inputs, call)

                row["measured_s"] = best_seconds(run, 1 if estimate > 2 else args.repeats)
            out.append(row)
            print(" | ".join(map(str, _cells(row))), flush=True)
    return out


def _cells(r: dict) -> list[object]:
    measured = r["measured_s"]
    ratio = f"{r['estimated_s'] / measured:.2f}" if measured else "-"
    shown = f"{measured * 1000:.0f}" if measured else "not run"
    return [
        r["model"], r["backend"], r["options"], r["rows"], r["length"],
        f"{r['estimated_s'] * 1000:.0f}", shown, ratio,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.names("--models", [TEXT_MODEL, "informer-ettm1-h288-c2048"]),
        cli.threads(1),
        cli.repeats(2),
    )
    p.add_argument("--max-seconds", type=float, default=20.0, help="estimate-only above this")
    args = cli.parse(p, argv, models=["informer-etth1-h24"], repeats=1, max_seconds=0.2)
    torch.set_num_threads(args.threads)
    device = select_device("auto")
    runtime = DeviceRuntime(device)
    report = Report("benchmarks.attention.cost_model", argv)
    rows: list[dict] = []
    for model in load_servables(Settings(models=tuple(args.models)), str(device)):
        rows += measure(model, runtime, args)
    ratios = [r["estimated_s"] / r["measured_s"] for r in rows if r["measured_s"]]
    report.add("Rates calibrated as the worker does at start-up.")
    report.table(
        [
            "model",
            "backend",
            "options",
            "rows",
            "length",
            "estimated ms",
            "measured ms",
            "est/meas",
        ],
        map(_cells, rows),
        "lllrrrrr",
    )
    report.add(
        f"est/measured over {len(ratios)} runs: median {statistics.median(ratios):.2f}, "
        f"min {min(ratios):.2f}, max {max(ratios):.2f}"
    )
    title = f"Estimated vs measured forward seconds ({device.type}, {args.threads} thread(s))"
    report.write(RESULTS / f"cost-model-{device.type}.md", title, data=rows)


if __name__ == "__main__":
    main()
