"""Zero-shot forecasters at long contexts: each backend on a TimesFM-2.5-shaped model at 2K-16K
steps of history, one request alone and at 8 concurrent clients, with the share of a forward
pass spent in attention and the cost model's predicted ratio beside the measured one.

    .venv/bin/python -m benchmarks.forecast.zero_shot [--contexts 2048 8192 16384] [--layers 20]
        [--backends flash bigbird performer] [--clients 8] [--model-options '{...}'] [--plot]
        [--family timesfm2_5|chronos2]

The model has TimesFM 2.5's shape (``TimesFm2_5Config()``'s defaults: hidden 1280, 16 heads of
80, patches of 32 steps, context 16384, 20 layers) at ``--layers`` layers (fewer run faster;
every layer is alike, so per-layer ratios carry over, and the table header says the depth) with
**random weights** (transformers' own initialisation), saved by
``TimesFm2_5ModelForPrediction.save_pretrained`` to a temporary folder and served as any
TimesFM 2.5 folder is (:mod:`models.zero_shot.timesfm`). A request is one single-channel series
of exactly ``context`` steps (a seeded random walk), so it runs at ``context / 32`` tokens.

``--model-options`` is the requests' ``model_options`` (JSON). TimesFM's default
``force_flip_invariance`` (the config's, True) runs every series twice (itself and its negation),
doubling the work of every row; ``'{"force_flip_invariance": false}'`` measures one pass.

Per backend (``--backends``, names of the backend registry; ``flash``, the reference, always
runs first) and context:

* **In-process** (``POST /forecast`` through FastAPI's TestClient, one request at a time, median
  of ``--repeats``): latency; the *attention share*, 1 - floor / latency, where the floor is the
  same request with every attention call of the bridge replaced by a free stub returning a
  tensor of the output's shape (:func:`benchmarks.attention.common.attention_replaced`), so
  what is left is everything but attention; the measured speed-up over ``flash`` beside the
  cost model's prediction (``flash``'s :meth:`work_estimate` over the backend's, the estimate
  the batcher prices batches with); the estimated peak memory the server admits a request by;
  the forecast's largest difference from ``flash``'s, relative to its range.
* **Served** (``attnserve serve`` in its own process, driven over HTTP by the harness's
  raw-socket client, :mod:`benchmarks.harness.capacity`): p50 of one client alone and
  requests/s at ``--clients`` clients, each against ``flash``.

The floor row (``no attention (floor)``) is the best any backend could do: its predicted ratio
counts the cost model's dense work alone.

``--family chronos2``: the same rows on a Chronos-2-shaped model (:data:`CHRONOS2_SHAPE`, 12
layers, patches of 16 steps, context 8192; default context 8192; its time self-attention runs
the backend, group attention stays exact: :mod:`models.zero_shot.chronos2`), built with the
``chronos-forecasting`` package's class at the tests' weight scale
(:mod:`tests.utils.tiny_chronos`). It refuses, naming what is missing, in a checkout without
the Chronos-2 forecaster. Results go to ``benchmarks/results/zero-shot-<family>-cpu.md``
(``.json`` beside it, ``.png`` with ``--plot``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import models.hf_forecast.bridge as bridge
from benchmarks.attention.common import attention_replaced
from benchmarks.harness import capacity, cli
from benchmarks.harness.host import load_average
from benchmarks.harness.report import RESULTS, Report, figure, log_axes, table
from benchmarks.text.long_document_speed import LONG_REQUESTS
from models.attention import BACKENDS
from models.names import DEFAULT_PRECISION

ROOT = Path(__file__).resolve().parents[2]
FLOOR = "no attention (floor)"
# a selection: the default sweep (flash, full and the approximations with a causal form)
DEFAULT_BACKENDS = ["flash", "full", "bigbird", "performer", "probsparse", "reformer"]
# What --smoke (and --tiny) build: the tests' tiny TimesFM, contexts of a few patches.
TINY: dict[str, Any] = {
    "context_length": 256,
    "horizon_length": 32,
    "output_quantile_len": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "head_dim": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}


# Chronos-2 (amazon/chronos-2, 120M parameters) as its published config.json reads: 12 encoder
# blocks of width 768, 12 heads of 64, feed-forward 3072, patches of 16 steps, context 8192,
# 64 output patches, 21 quantile levels.
CHRONOS2_SHAPE: dict[str, Any] = {"d_model": 768, "d_kv": 64, "d_ff": 3072, "num_heads": 12}
CHRONOS2_FORECASTING: dict[str, Any] = {
    "context_length": 8192,
    "input_patch_size": 16,
    "input_patch_stride": 16,
    "output_patch_size": 16,
    "max_output_patches": 64,
    "quantiles": [0.01, 0.05, *(round(0.1 * i, 1) for i in range(1, 10)), 0.95, 0.99],
    "use_reg_token": True,
    "use_arcsinh": True,
    "time_encoding_scale": 8192,
}
# family -> (words, full depth, default contexts)
FAMILIES: dict[str, tuple[str, int, list[int]]] = {
    "timesfm2_5": ("TimesFM 2.5's shape", 20, [2048, 8192, 16384]),
    "chronos2": ("Chronos-2's shape (amazon/chronos-2)", 12, [8192]),
}


def build_timesfm(folder: Path, layers: int, tiny: bool = False) -> dict[str, Any]:
    """A random-weight ``TimesFm2_5ModelForPrediction`` at the default config's shape (or
    :data:`TINY`), ``layers`` deep, saved by transformers' class; returns context, patch and
    the flip default."""
    from transformers import TimesFm2_5Config, TimesFm2_5ModelForPrediction

    config = TimesFm2_5Config(**(TINY if tiny else {}), num_hidden_layers=layers)
    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    TimesFm2_5ModelForPrediction(config).eval().save_pretrained(str(folder))
    return {
        "context": config.context_length,
        "patch": config.patch_length,
        "flip": config.force_flip_invariance,
    }


def build_chronos2(folder: Path, layers: int, tiny: bool = False) -> dict[str, Any]:
    """A random-weight ``Chronos2Model`` at :data:`CHRONOS2_SHAPE` (or the tests' tiny one),
    ``layers`` deep, saved by the ``chronos-forecasting`` package's class."""
    from chronos.chronos2 import Chronos2Model
    from chronos.chronos2.config import Chronos2CoreConfig

    from tests.utils.tiny_chronos import INIT_FACTOR, chronos2_config

    if tiny:
        config = chronos2_config(context_length=256)
        config.num_layers = layers
    else:
        config = Chronos2CoreConfig(
            **CHRONOS2_SHAPE,
            num_layers=layers,
            dropout_rate=0.0,
            initializer_factor=INIT_FACTOR,
            chronos_config=CHRONOS2_FORECASTING,
        )
    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    Chronos2Model(config).eval().save_pretrained(folder)
    forecasting = config.chronos_config
    return {
        "context": forecasting["context_length"],
        "patch": forecasting["input_patch_size"],
        "flip": None,
    }


def series_of(context: int, seed: int = 0) -> list[float]:
    """A seeded random walk around 10 of ``context`` steps (a whole number of patches)."""
    rng = np.random.default_rng(seed)
    return (10.0 + np.cumsum(rng.normal(0.0, 0.1, context))).round(4).tolist()


def body(
    name: str, backend: str, values: list[float], options: dict[str, Any], precision: str
) -> dict:
    """One ``POST /forecast`` body: one single-channel series (columnar), ``backend``."""
    out: dict[str, Any] = {"model": name, "series": [{"columns": {"y": values}}]}
    out["attention"] = backend
    if precision != DEFAULT_PRECISION:
        out["precision"] = precision
    return {**out, "model_options": options} if options else out


def label_of(backend: str, precision: str) -> str:
    """A row's name: the backend, with its precision when not float32."""
    return backend if precision == DEFAULT_PRECISION else f"{backend} @{precision}"


def in_process(folder: Path, args: argparse.Namespace) -> dict[str, dict[int, dict[str, Any]]]:
    """Per row (backend or floor) and context: median seconds, the point forecast, the estimated
    peak memory and the cost model's work, through ``POST /forecast`` in-process."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    settings = Settings(
        models=(str(folder),),
        device="cpu",
        background_load=False,
        max_wait_ms=0.0,
        max_request_compute_s=0.0,  # as LONG_REQUESTS: no compute bound, a long timeout
        request_timeout_s=900.0,
        precisions=tuple(args.precisions),
    )
    runs = [(label_of(b, p), b, False, p) for p in args.precisions for b in args.backends]
    runs.append((FLOOR, "flash", True, DEFAULT_PRECISION))
    times: dict[str, dict[int, list[float]]] = {label: {} for label, *_ in runs}
    rows: dict[str, dict[int, dict[str, Any]]] = {label: {} for label, *_ in runs}
    series = {n: series_of(n) for n in args.contexts}
    with TestClient(create_app(settings)) as client:
        model = client.app.state.attnserve.registry.find(folder.name).model  # type: ignore[attr-defined]

        def post(backend: str, values: list[float], precision: str) -> tuple[float, dict[str, Any]]:
            start = time.perf_counter()
            sent = body(folder.name, backend, values, args.options, precision)
            answer = client.post("/forecast", json=sent)
            seconds = time.perf_counter() - start
            if answer.status_code != 200:
                raise SystemExit(f"{backend}: {answer.status_code} {answer.text[:400]}")
            return seconds, answer.json()

        for _, backend, stub, precision in runs:  # warm-up at the shortest context
            with attention_replaced(bridge, stub):
                post(backend, series[min(args.contexts)], precision)
        for round_ in range(args.repeats):
            for label, backend, stub, precision in runs:
                for context in args.contexts:
                    with attention_replaced(bridge, stub):
                        seconds, answer = post(backend, series[context], precision)
                    times[label].setdefault(context, []).append(seconds)
                    tokens = model.tokens_of(context)
                    work = (
                        model.dense_work(1, tokens)
                        if stub
                        else model.work_estimate(backend, None, 1, tokens)  # its default options
                    )
                    rows[label][context] = {
                        "precision": precision,
                        "seconds": statistics.median(times[label][context]),
                        "tokens": tokens,
                        "values": answer["forecasts"][0]["values"],
                        "memory_bytes": model.memory_estimate(backend, None, 1, tokens),
                        "work": work,
                    }
                    print(
                        f"round {round_ + 1}: {label:>22} {context:>6}: {seconds:.2f} s", flush=True
                    )
    return rows


def served(folder: Path, args: argparse.Namespace) -> dict[str, dict[int, capacity.Capacity]]:
    """:func:`benchmarks.harness.capacity.serve` of ``POST /forecast``, one series a request."""
    series = {n: series_of(n) for n in args.contexts}

    def bodies(context: int) -> dict[str, list[Any]]:
        return {
            label_of(b, p): [body(folder.name, b, series[context], args.options, p)]
            for p in args.precisions
            for b in args.backends
        }

    flags = (*LONG_REQUESTS, "--precisions", ",".join(args.precisions))
    return capacity.serve(folder, "/forecast", bodies, args, flags)


def _difference(values: list, reference: list) -> float:
    """Largest |forecast - flash's| over the range of flash's forecast."""
    a, b = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    spread = float(np.ptp(b)) or 1.0
    return float(np.abs(a - b).max() / spread)


def rows_table(
    rows: dict[str, dict[int, dict[str, Any]]],
    caps: dict[str, dict[int, capacity.Capacity]],
    contexts: list[int],
    clients: int,
) -> str:
    """One Markdown row per backend (and the floor) and context, ratios against ``flash``."""
    floor, flash = rows[FLOOR], rows["flash"]
    cells = []
    for label, by_context in rows.items():
        for n in contexts:
            cell, ref = by_context[n], flash[n]
            float32 = cell.get("precision", DEFAULT_PRECISION) == DEFAULT_PRECISION
            share = 1.0 - floor[n]["seconds"] / cell["seconds"]
            cap, base = caps.get(label, {}).get(n), caps.get("flash", {}).get(n)
            served_cells = ["-"] * 4
            if cap is not None and base is not None:
                served_cells = [
                    f"{cap.p50_ms:.0f}",
                    f"{base.p50_ms / cap.p50_ms:.2f}x",
                    f"{cap.rate:.2f}",
                    f"**{cap.rate / base.rate:.2f}x**",
                ]
            cells.append(
                [
                    f"`{label}`",
                    f"{n} / {cell['tokens']}",
                    f"{cell['seconds']:.2f}",
                    # The floor runs float32: a share against it means nothing in another precision.
                    "-" if label == FLOOR or not float32 else f"{share:.0%}",
                    f"{ref['seconds'] / cell['seconds']:.2f}x",
                    # The cost model prices the backend, not the precision.
                    f"{ref['work'] / cell['work']:.2f}x" if float32 else "-",
                    f"{cell['memory_bytes'] / 2**20:.0f}",
                    "-" if label == FLOOR else f"{_difference(cell['values'], ref['values']):.3f}",
                    *served_cells,
                ]
            )
    columns = [
        "backend",
        "steps / tokens",
        "in-process s",
        "attention share",
        "× flash measured",
        "× flash predicted",
        "est. peak MiB",
        "diff. to flash",
        "p50 ms @1 client",
        "× flash @1",
        f"req/s @{clients} clients",
        f"× flash @{clients}",
    ]
    return table(columns, cells, "ll" + "r" * 10)


def header(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The paragraph before the table: the model, its depth, the options and what each column
    means."""
    flip = result["force_flip_invariance"]
    flip_words = "; `force_flip_invariance` " + (
        "True: every series runs twice, itself and its negation, doubling the work"
        if flip
        else "False: one pass per series"
    )
    if flip is None:  # Chronos-2: no such option
        flip_words = "; tokens: history patches, [REG] and the horizon's output patches"
    return (
        f"{result['model']}, **{result['layers']} of {result['full_layers']} layers**, random "
        f"weights; one single-channel series of `steps` steps per request ({result['patch']} "
        f"steps a token){flip_words}. {args.threads} torch threads. "
        f"In-process: `POST /forecast` through TestClient, one request at a time, median of "
        f"{args.repeats}; attention share = 1 - floor / latency, the floor being the same "
        "request with every attention call replaced by a free stub of the output's shape; "
        "× flash predicted = flash's cost-model work over the backend's (the floor: the dense "
        "work alone); diff. to flash: the forecast's largest difference over flash's range. "
        f"Served: `attnserve serve` in its own process over HTTP: p50 of one client alone, "
        f"req/s at {args.clients} closed-loop clients by Little's law, windows of at least "
        f"{args.capacity_seconds:g} s (see the long-decoder page for the method)."
    )


def plot(result: dict[str, Any], path: Path) -> None:
    """Requests/s at ``--clients`` clients and in-process latency against context, per backend."""
    with figure(path, ncols=2, size=(12, 4.5)) as (left, right):
        for label, cells in result["capacity"]["rows"].items():
            xs = sorted(int(n) for n in cells)
            left.plot(xs, [cells[str(x)]["requests_per_s"] for x in xs], marker="o", label=label)
        log_axes(left, "steps of history", f"req/s @{result['capacity']['clients']} clients")
        for label, cells in result["rows"].items():
            xs = sorted(int(n) for n in cells)
            right.plot(xs, [cells[str(x)]["seconds"] for x in xs], marker="o", label=label)
        log_axes(right, "steps of history", "one request in-process, s")
        left.set_title(result["title"])


def family_refusal(family: str) -> str | None:
    """Why ``--family`` cannot run in this checkout, or None."""
    if family != "chronos2":
        return None
    needed = ("models/zero_shot/chronos2.py", "tests/utils/tiny_chronos.py")
    missing = [p for p in needed if not (ROOT / p).is_file()]
    if not missing:
        return None
    return (
        f"--family chronos2: this checkout has no Chronos-2 forecaster (missing "
        f"{', '.join(missing)}); only --family timesfm2_5 runs"
    )


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.sizes(
            "--contexts",
            [],
            "steps of history per request (default: 2048 8192 16384 for "
            "TimesFM, 8192 for Chronos-2)",
        ),
        cli.names("--backends", DEFAULT_BACKENDS, "backends (flash is always added)", BACKENDS),
        cli.repeats(1),
        cli.threads(torch.get_num_threads()),
    )
    parser.add_argument("--family", choices=["timesfm2_5", "chronos2"], default="timesfm2_5")
    parser.add_argument(
        "--layers", type=int, help="depth (default the real one: TimesFM 2.5 20, Chronos-2 12)"
    )
    parser.add_argument(
        "--model-options",
        default="{}",
        help="the requests' model_options as JSON (default: the config's, "
        "force_flip_invariance true: twice the work)",
    )
    parser.add_argument(
        "--precisions",
        type=lambda text: text.split(","),
        default=[DEFAULT_PRECISION],
        help="comma-separated precisions, each backend's row per precision (float32 first: "
        "the reference); e.g. float32,bfloat16",
    )
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny shape (--smoke)")
    parser.add_argument("--plot", action="store_true", help="also write the .png")
    parser.add_argument(
        "--output-prefix", type=Path, help="default benchmarks/results/zero-shot-<family>-cpu"
    )
    capacity.options(parser, [])  # its --capacity-lengths is unused: --contexts serve both
    args = cli.parse(
        parser, argv, contexts=[128, 256], backends=["flash", "bigbird"], layers=1, tiny=True,
        capacity_seconds=1.0, plot=True,
    )  # fmt: skip
    refusal = family_refusal(args.family)
    if refusal:
        parser.error(refusal)
    words, full_layers, contexts = FAMILIES[args.family]
    args.contexts = args.contexts or contexts
    args.output_prefix = args.output_prefix or RESULTS / f"zero-shot-{args.family}-cpu"
    args.layers = args.layers or full_layers
    args.backends = ["flash", *(b for b in dict.fromkeys(args.backends) if b != "flash")]
    args.options = json.loads(args.model_options)
    args.capacity_lengths = args.contexts
    args.capacity_layers = args.layers
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.forecast.zero_shot", argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / f"{args.family}-shape"
        build = build_chronos2 if args.family == "chronos2" else build_timesfm
        config = build(folder, args.layers, args.tiny)
        too_long = [n for n in args.contexts if n > config["context"]]
        if too_long:
            parser.error(f"contexts {too_long} exceed the model's {config['context']}")
        rows = in_process(folder, args)
        caps = served(folder, args)
    flip = args.options.get("force_flip_invariance", config["flip"])
    result = {
        "family": args.family,
        "model": words + (" (tiny)" if args.tiny else ""),
        "title": f"{words}, CPU",
        "layers": args.layers,
        "full_layers": full_layers,
        "patch": config["patch"],
        "force_flip_invariance": flip,
        "model_options": args.options,
        "threads": args.threads,
        "repeats": args.repeats,
        "contexts": args.contexts,
        "load_before": report.load_before,
        "load_after": load_average(),
        "rows": {b: {str(n): c for n, c in cells.items()} for b, cells in rows.items()},
        "capacity": capacity.record_of(caps, args),
    }
    report.add(header(result, args), rows_table(rows, caps, args.contexts, args.clients))
    report.write(args.output_prefix.with_suffix(".md"), data=result)
    if args.plot:
        plot(result, args.output_prefix.with_suffix(".png"))


if __name__ == "__main__":
    main()
