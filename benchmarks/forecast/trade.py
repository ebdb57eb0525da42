"""The attention trade through HTTP: for each long-context forecaster and each backend, what a
request costs (latency, throughput, memory) beside what it is worth (test MSE).

    python -m benchmarks.forecast.trade                    # the shipped ETTm1 context-2048 models
    python -m benchmarks.forecast.trade --models informer-ettm1-h96-c2048 --seconds 20
    python -m benchmarks.forecast.trade --payload columns  # histories as JSON numbers

Per model, one ``attnserve serve`` process (only that model, ``--torch-threads`` threads, batches
of up to 32) and per backend the phases below, ``--seconds`` each in total, split into
``--rounds`` rounds that visit every backend in turn (round-robin: a slow spell of a shared
machine then hits every backend alike instead of whichever ran during it):

* **p50 at 1 client**: one closed-loop client with a keep-alive connection (``http.client``,
  so the figure is the server's and the transport's, not a client library's) sending one window
  per request (consecutive ETTm1 test-split windows; ``--payload base64``, the default: columns
  as base64 float32, the API's most compact form; ``columns``: columns as JSON numbers) for
  ``--seconds``; median client latency, and the median of each request's latency minus the
  server's ``x-inference-time-ms`` (what the request cost over its inference).
* **in-process**: the same model loaded in this process, one window per
  :meth:`~models.informer.InformerForecaster.predict` call (what ``x-inference-time-ms`` times
  in the server), ``--threads`` torch threads, median over the rounds while the server is
  idle: the speed-up over ``flash`` the attention choice is worth before any HTTP. The table
  sets each backend's speed-up through HTTP beside it.
* **throughput at 8 clients**: eight such clients at once; answered requests per second.
* **peak memory**: the server's resident memory sampled every 10 ms during both phases, minus
  its resident memory when the phase started (allocations freed between batches return to the
  OS, so the peak of one backend does not hide another's).
* **test MSE** (scaled units) from the checkpoint's ``quality.json`` (``attnserve evaluate``; a
  backend scored on every k-th window says so), and the linear baseline's as the reference row.

Each option variant scored in ``quality.json`` (``attnserve evaluate --variants``, e.g.
``performer(num_features=8)``) gets a row too, sent as that backend with those
``attention_options`` (``--no-variants``: backends at their defaults only).

``auto`` in ``--backends`` (there by default) adds a row for ``attention: "auto"`` with
``max_quality_loss`` ``--auto-budget`` (0.1): the backend it resolved to, its MSE, and below the
table its speed against the fastest fixed backend within the same budget and against ``flash``.

``--before PATH`` also serves the same model from another checkout (e.g. ``git archive <commit> |
tar -x -C PATH``) and times it at 1 client in the same rounds, right after this checkout's
phase of each backend: a before/after table with each side's ratio to its own ``flash``.
The load average is recorded at every round's start.

Writes ``benchmarks/results/forecast-trade.{md,json,png}`` (``--out`` to change): the table and
latency against MSE (the plot when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import torch

from benchmarks.forecast.overhead import KeepAlive
from benchmarks.harness.report import RESULTS
from benchmarks.host import cpu_model, load_average
from benchmarks.service import (
    LoadResult,
    ServerProcess,
    Workload,
    combined,
    drive,
)
from models.attention import get_backend
from models.informer import InformerForecaster
from models.informer.checkpoint import shipped_dirs
from models.informer.timefeatures import format_timestamps
from models.names import BACKEND_NAMES
from models.quality_loss import forecast_losses, forecast_variant_losses, variant_label
from models.training.source import source_of
from service.http.schemas.forecast import ForecastRequest

LONG_MODELS = ("informer-ettm1-h96-c2048", "informer-ettm1-h288-c2048")
PAYLOADS = ("base64", "columns")
# An approximate backend's speed-up over flash through HTTP should keep this share of its
# in-process speed-up (the bar: within 20 %).
KEEP_GAIN = 0.8
# predict() calls per backend and round for the in-process figure.
IN_PROCESS_REPEATS = 5


def columnar_windows(model_dir: Path, n: int, payload: str = "columns") -> list[dict[str, Any]]:
    """``n`` consecutive test-split histories of the model's context, as columnar series
    (``payload``: ``columns`` as JSON numbers, ``base64`` as base64 little-endian float32)."""
    meta = json.loads((model_dir / "config.json").read_text())
    source = source_of(meta)
    context = int(meta["context"])
    table, _splits, _scaler = source.load(context)
    first = source.borders["test"][0] - context
    series = []
    for i in range(n):
        rows = slice(first + i, first + i + context)
        series.append(
            {
                "start": format_timestamps(table.stamps[rows][:1])[0],
                "columns": {
                    c: _column(table.values[rows, j], payload) for j, c in enumerate(source.columns)
                },
            }
        )
    return series


def _column(values: Any, payload: str) -> Any:
    if payload == "base64":
        return base64.b64encode(values.astype("<f4").tobytes()).decode()
    return values.tolist()


class PeakRss:
    """Samples a process's resident memory every ``interval`` seconds in a thread."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.base = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def extra_mib(self) -> float:
        return (self.peak - self.base) / 2**20


def one_client(url: str, bodies: list[bytes], seconds: float, warmup: float) -> LoadResult:
    """One closed-loop keep-alive client for ``warmup + seconds``; the answers of the last
    ``seconds``, their latencies and (as ``batch_sizes``' neighbour, ``overheads_ms``) each
    one's latency minus the server's inference time."""
    client = KeepAlive(url, "http.client")
    latencies: list[float] = []
    overheads: list[float] = []
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    i = 0
    try:
        while time.perf_counter() < stop_at:
            ms, headers = client.post(bodies[i % len(bodies)])
            i += 1
            if time.perf_counter() >= measure_from:
                latencies.append(ms)
                overheads.append(ms - float(headers["x-inference-time-ms"]))
    finally:
        client.close()
    result = LoadResult(len(latencies), seconds, latencies, [1] * len(latencies))
    result.overheads_ms = overheads  # type: ignore[attr-defined]
    return result


def in_process_ms(
    forecaster: InformerForecaster, window: Any, backend: str, options: dict[str, Any], n: int
) -> list[float]:
    """``n`` timings (ms) of one window's :meth:`InformerForecaster.predict`."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        forecaster.predict([window], backend, options)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def measured_runs(quality: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per label (``performer``, ``performer(num_features=8)``): the request fields, the test
    figures and the loss ``auto`` budgets against, for each backend at its defaults and each
    option variant in ``quality.json``."""
    losses = forecast_losses(quality)
    runs = {
        backend: {
            "attention": backend,
            "options": {},
            "figures": entry,
            "loss": losses.get(backend),
        }
        for backend, entry in quality["backends"].items()
    }
    # By label, not by position: a variant without a loss (no exact figure) is still measured.
    variant_losses = {variant_label(b, o): loss for b, o, loss in forecast_variant_losses(quality)}
    for entry in quality.get("variants", []):
        label = variant_label(entry["backend"], entry["options"])
        runs[label] = {
            "attention": entry["backend"],
            "options": entry["options"],
            "figures": entry,
            "loss": variant_losses.get(label),
        }
    return runs


def measure_model(
    model: str,
    backends: list[str],
    seconds: float,
    threads: int,
    log_dir: Path,
    auto_budget: float = 0.1,
    payload: str = "base64",
    variants: bool = True,
    rounds: int = 3,
    before: Path | None = None,
    loads: list[str] | None = None,
) -> list[dict[str, Any]]:
    directory = shipped_dirs().get(model) or Path(model)
    quality = json.loads((directory / "quality.json").read_text())
    runs = measured_runs(quality)
    series = columnar_windows(directory, 64, payload)
    server = ServerProcess([str(directory)], threads, 32, log_dir / f"trade-{directory.name}.log")
    old = None
    if before is not None:  # the same weights, served by the other checkout's code
        old = ServerProcess(
            [str(directory)],
            threads,
            32,
            log_dir / f"trade-before-{directory.name}.log",
            root=before,
        )
    labels = [b for b in backends if b != "auto"]
    if variants:  # each measured variant beside the backends, auto last
        labels += [label for label in runs if label not in BACKEND_NAMES]
    labels += [b for b in backends if b == "auto"]
    rows = []
    forecaster = InformerForecaster.load(str(directory))
    request = ForecastRequest.model_validate({"model": directory.name, "series": series[:1]})
    window = forecaster.prepare(**request.series[0].packed())
    try:
        server.wait_ready()
        if old is not None:
            old.wait_ready()
        prepared = {}
        for label in labels:
            run = runs.get(label, {"attention": label, "options": {}})
            extra: dict[str, Any] = {}
            if label == "auto":
                extra["max_quality_loss"] = auto_budget
            elif run["options"]:
                extra["attention_options"] = run["options"]
            bodies = [
                json.dumps(
                    {"model": directory.name, "series": [s], "attention": run["attention"], **extra}
                ).encode()
                for s in series
            ]
            reason = auto_reason(server.url, bodies[0])
            # What ran, as measured_runs names it: a fixed request's own label (the response
            # names only the backend); for auto the header's, which names the variant.
            ran = label if reason is None else reason.split(";", 1)[0]
            # In process: what ran (auto: the variant it chose), at the request's options.
            ran_run = runs.get(ran, run)
            call = (ran_run["attention"], dict(ran_run["options"]))
            prepared[label] = (Workload("/forecast", bodies), ran, reason, call)
        # Round-robin: every label's phases in each round, so a slow spell of a shared host
        # lands on all of them alike instead of on whichever ran then.
        ones: dict[str, list[LoadResult]] = {label: [] for label in labels}
        eights: dict[str, list[LoadResult]] = {label: [] for label in labels}
        peaks: dict[str, float] = dict.fromkeys(labels, 0.0)
        local: dict[str, list[float]] = {label: [] for label in labels}
        overheads: dict[str, list[float]] = {label: [] for label in labels}
        olds: dict[str, list[LoadResult]] = {label: [] for label in labels}
        share = seconds / rounds
        for round_ in range(rounds):
            if loads is not None:
                loads.append(f"{directory.name} round {round_ + 1}: {load_average()}")
            for label in labels:
                work, _ran, _reason, (backend, options) = prepared[label]
                warm = 2.0 if round_ == 0 else 0.5
                if round_ == 0:
                    forecaster.predict([window], backend, options)  # warm-up
                local[label] += in_process_ms(
                    forecaster, window, backend, options, IN_PROCESS_REPEATS
                )
                with PeakRss(server.proc.pid) as mem:
                    one_run = one_client(server.url, work.bodies, share, warm)
                    ones[label].append(one_run)
                    overheads[label] += one_run.overheads_ms  # type: ignore[attr-defined]
                    eights[label].append(asyncio.run(drive(server.url, work, 8, share, warm)))
                peaks[label] = max(peaks[label], mem.extra_mib)
                if old is not None:
                    olds[label].append(one_client(old.url, work.bodies, share, warm))
        for label in labels:
            _work, ran, reason, (backend, _options) = prepared[label]
            one, eight = combined(ones[label]), combined(eights[label])
            q = runs.get(ran, {}).get("figures") or {}
            rows.append(
                {
                    "model": directory.name,
                    "backend": label,
                    "ran": ran,
                    "choice": reason,
                    "quality_loss": runs.get(ran, {}).get("loss"),
                    "budget": auto_budget if label == "auto" else None,
                    "approximate": not get_backend(backend).exact,
                    "p50_ms_1_client": one.pct(50),
                    "before_p50_ms_1_client": combined(olds[label]).pct(50) if old else None,
                    "overhead_p50_ms": median(overheads[label]),
                    "in_process_ms": median(local[label]),
                    "requests_per_s_8_clients": eight.throughput,
                    "mean_batch_8_clients": (
                        sum(eight.batch_sizes) / len(eight.batch_sizes)
                        if eight.batch_sizes
                        else float("nan")
                    ),
                    "peak_extra_mib": peaks[label],
                    "errors": one.errors + eight.errors,
                    "test_mse": q.get("mse"),
                    "mse_windows": q.get("windows"),
                    "linear_mse": q.get("linear_mse", quality["linear_baseline"]["mse"]),
                    "linear_mse_all": quality["linear_baseline"]["mse"],
                    "stride": q.get("stride", 1),
                }
            )
            r = rows[-1]
            print(
                f"{directory.name} {label:26s} p50 {r['p50_ms_1_client']:8.1f} ms  "
                f"(in-process {r['in_process_ms']:6.1f}, overhead {r['overhead_p50_ms']:4.1f})  "
                f"{r['requests_per_s_8_clients']:6.2f} req/s @8  +{r['peak_extra_mib']:6.0f} MiB  "
                f"MSE {r['test_mse']}",
                flush=True,
            )
    finally:
        server.stop()
        if old is not None:
            old.stop()
    return rows


def auto_reason(url: str, body: bytes) -> str | None:
    """Send one request (it must succeed): its ``x-attention-choice`` header, which ``auto``
    requests get (the variant it ran and why); None for a fixed backend."""
    r = httpx.post(
        f"{url}/forecast", content=body, headers={"content-type": "application/json"}, timeout=60
    )
    r.raise_for_status()
    return r.headers.get("x-attention-choice")


def vs_reference(r: dict[str, Any], ref: dict[str, Any]) -> float:
    """``r``'s test MSE relative to ``ref``'s, minus 1; backends scored on different windows
    compare through the linear baseline on their own windows."""
    return (r["test_mse"] / r["linear_mse"]) / (ref["test_mse"] / ref["linear_mse"]) - 1


def cheapest_summary(
    rows: list[dict[str, Any]], default: dict[str, str], within: float = 0.10
) -> str:
    """Per model: the fastest approximate backend whose test MSE is within ``within`` of the
    default backend's (compared through the linear baseline on each one's own windows), against
    ``flash`` and ``full``."""
    lines = []
    for model in dict.fromkeys(r["model"] for r in rows):
        group = {r["backend"]: r for r in rows if r["model"] == model}
        ref, flash, full = group.get(default[model]), group.get("flash"), group.get("full")
        if ref is None or flash is None or full is None or not ref["test_mse"]:
            continue
        ok = [
            r
            for name, r in group.items()
            if name not in ("full", "flash", "auto")
            and r["test_mse"]
            and vs_reference(r, ref) <= within
        ]
        if not ok:
            continue
        best = min(ok, key=lambda r: r["p50_ms_1_client"])
        lines.append(
            f"- {model}: the fastest approximate backend with test MSE within {within:.0%} of "
            f"the default's is **{best['backend']}**, p50 {best['p50_ms_1_client']:.0f} ms: "
            f"{flash['p50_ms_1_client'] / best['p50_ms_1_client']:.2f}x faster than flash "
            f"({flash['p50_ms_1_client']:.0f} ms), "
            f"{full['p50_ms_1_client'] / best['p50_ms_1_client']:.1f}x faster than full "
            f"({full['p50_ms_1_client']:.0f} ms)."
        )
    return "\n".join(lines)


def auto_summary(rows: list[dict[str, Any]]) -> str:
    """Per model: ``auto`` against the fastest fixed backend whose measured loss is within the
    same budget, and against ``flash``."""
    lines = []
    for r in rows:
        if r["backend"] != "auto":
            continue
        group = [g for g in rows if g["model"] == r["model"] and g["backend"] != "auto"]
        within = [g for g in group if (g["quality_loss"] or 0.0) <= r["budget"]]
        best = min(within, key=lambda g: g["p50_ms_1_client"], default=None)
        flash = next((g for g in group if g["backend"] == "flash"), None)
        if best is None or flash is None:
            continue
        lines.append(
            f"- {r['model']}: `auto` (max_quality_loss {r['budget']:g}) ran **{r['ran']}** "
            f"(`x-attention-choice: {r['choice']}`); p50 {r['p50_ms_1_client']:.0f} ms vs the "
            f"fastest fixed backend within the budget ({best['backend']}) "
            f"{best['p50_ms_1_client']:.0f} ms: {r['p50_ms_1_client'] / best['p50_ms_1_client']:.2f}x "
            f"its latency, {r['requests_per_s_8_clients'] / best['requests_per_s_8_clients']:.2f}x "
            f"its throughput at 8 clients; {flash['p50_ms_1_client'] / r['p50_ms_1_client']:.2f}x "
            "faster than flash."
        )
    return "\n".join(lines)


def gains(group: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per backend of one model: its speed-up over ``flash`` through HTTP (p50 at 1 client)
    and in process (one window's predict)."""
    flash = next((r for r in group if r["backend"] == "flash"), None)
    if flash is None:
        return {}
    return {
        r["backend"]: (
            flash["p50_ms_1_client"] / r["p50_ms_1_client"],
            flash["in_process_ms"] / r["in_process_ms"],
        )
        for r in group
    }


def table(rows: list[dict[str, Any]], default: dict[str, str]) -> str:
    lines = [
        "| model | backend | p50 ms @1 client | overhead ms | in-process ms | × flash | "
        "× flash in-process | kept | × full | req/s @8 clients | peak extra MiB | test MSE | "
        "MSE vs default |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    for model, group in by_model.items():
        full = next((r for r in group if r["backend"] == "full"), None)
        ref = next((r for r in group if r["backend"] == default[model]), None)
        lin = group[0]["linear_mse_all"]
        speed = gains(group)
        lines.append(f"| {model} | *linear baseline* | | | | | | | | | | {lin:.4f} | |")
        for r in group:
            http, local = speed.get(r["backend"], (float("nan"), float("nan")))
            vs_full = full["p50_ms_1_client"] / r["p50_ms_1_client"] if full else float("nan")
            mse = r["test_mse"]
            vs = f"{vs_reference(r, ref):+.2%}" if ref and mse and ref["test_mse"] else "—"
            label = (
                f"**{r['backend']}** (default)" if r["backend"] == default[model] else r["backend"]
            )
            if r["backend"] == "auto":
                label = f"auto (max_quality_loss {r['budget']:g}) → {r['ran']}"
            every = "" if r["stride"] == 1 else f" (every {r['stride']}th window)"
            mse_cells = f"{mse:.4f}{every} | {vs}" if mse is not None else "— | —"
            kept = f"{http / local:.0%}" if r["approximate"] else ""
            lines.append(
                f"| {model} | {label} | {r['p50_ms_1_client']:.1f} | "
                f"{r['overhead_p50_ms']:.1f} | {r['in_process_ms']:.1f} | {http:.2f}x | "
                f"{local:.2f}x | {kept} | {vs_full:.1f}x | "
                f"{r['requests_per_s_8_clients']:.2f} | {r['peak_extra_mib']:.0f} | {mse_cells} |"
            )
    return "\n".join(lines)


def before_after(rows: list[dict[str, Any]]) -> str:
    """p50 at 1 client of the ``--before`` checkout and this one, each with its ratio to its
    own ``flash`` (empty without ``--before``)."""
    if not any(r.get("before_p50_ms_1_client") for r in rows):
        return ""
    lines = [
        "| model | backend | before p50 ms | before × flash | after p50 ms | after × flash |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for model in dict.fromkeys(r["model"] for r in rows):
        group = [r for r in rows if r["model"] == model]
        flash = next((r for r in group if r["backend"] == "flash"), None)
        if flash is None:
            continue
        for r in group:
            b, a = r["before_p50_ms_1_client"], r["p50_ms_1_client"]
            lines.append(
                f"| {model} | {r['backend']} | {b:.1f} | "
                f"{flash['before_p50_ms_1_client'] / b:.2f}x | {a:.1f} | "
                f"{flash['p50_ms_1_client'] / a:.2f}x |"
            )
    return "\n".join(lines)


def gain_summary(rows: list[dict[str, Any]]) -> str:
    """Per model: how much of each approximate backend's in-process speed-up over ``flash``
    survives HTTP (the bar: :data:`KEEP_GAIN`)."""
    lines = []
    for model in dict.fromkeys(r["model"] for r in rows):
        group = [r for r in rows if r["model"] == model]
        speed = gains(group)
        kept = {
            r["backend"]: speed[r["backend"]][0] / speed[r["backend"]][1]
            for r in group
            if r["approximate"] and r["backend"] in speed
        }
        if not kept:
            continue
        short = [b for b, k in kept.items() if k < KEEP_GAIN]
        worst = min(kept, key=lambda b: kept[b])
        lines.append(
            f"- {model}: the approximate backends keep {min(kept.values()):.0%}-"
            f"{max(kept.values()):.0%} of their in-process speed-up over flash through HTTP "
            f"(least: {worst}, {speed[worst][0]:.2f}x vs {speed[worst][1]:.2f}x); "
            + (
                f"under {KEEP_GAIN:.0%}: {', '.join(short)}."
                if short
                else f"every one within {1 - KEEP_GAIN:.0%} of its in-process gain."
            )
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no {path.name}")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        group = [r for r in rows if r["model"] == model and r["test_mse"] is not None]
        variants = [r for r in group if r["backend"] not in (*BACKEND_NAMES, "auto")]
        for r in group:
            y = r["test_mse"] / r["linear_mse"]  # same windows: comparable across strides
            if r in variants:  # unlabelled: they crowd the backends they vary
                ax.scatter(r["p50_ms_1_client"], y, marker="x", color="grey")
                continue
            ax.scatter(r["p50_ms_1_client"], y)
            name = r["backend"] if r["backend"] != "auto" else f"auto→{r['ran']}"
            ax.annotate(name, (r["p50_ms_1_client"], y), fontsize=8, rotation=20)
        if variants:
            ax.scatter([], [], marker="x", color="grey", label="option variants (table)")
        ax.axhline(1.0, ls="--", color="grey", label="linear baseline")
        ax.set_xscale("log")
        ax.set_xlabel("p50 latency at 1 client (ms, log)")
        ax.set_ylabel("test MSE / linear baseline's (same windows)")
        ax.set_title(model, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(LONG_MODELS))
    p.add_argument("--backends", nargs="+", default=[*BACKEND_NAMES, "auto"])
    p.add_argument("--auto-budget", type=float, default=0.1, help="max_quality_loss for auto")
    p.add_argument("--seconds", type=float, default=12.0, help="per phase, over all rounds")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="split each phase into this many rounds, every backend in each (round-robin)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--payload", choices=PAYLOADS, default="base64", help="how histories travel")
    p.add_argument(
        "--no-variants",
        dest="variants",
        action="store_false",
        help="leave out the option variants scored in quality.json (measured by default)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="default: results/forecast-trade[-PAYLOAD]"
    )
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"), help="server logs go here")
    p.add_argument(
        "--before", type=Path, default=None, help="another checkout, timed in the same rounds"
    )
    args = p.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if args.out is None:
        suffix = "" if args.payload == "base64" else f"-{args.payload}"
        args.out = RESULTS / f"forecast-trade{suffix}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)  # the in-process figures: as the server runs
    load0 = load_average()
    loads: list[str] = []
    rows: list[dict[str, Any]] = []
    default = {}
    for model in args.models:
        directory = shipped_dirs().get(model) or Path(model)
        default[directory.name] = json.loads((directory / "quality.json").read_text())[
            "default_backend"
        ]
        rows += measure_model(
            model,
            args.backends,
            args.seconds,
            args.threads,
            args.log_dir,
            args.auto_budget,
            args.payload,
            args.variants,
            args.rounds,
            args.before,
            loads,
        )
    how = "base64 float32 columns" if args.payload == "base64" else "columns as JSON numbers"
    flag = "" if args.payload == "base64" else f" --payload {args.payload}"
    comparison = before_after(rows)
    if comparison:
        comparison = (
            f"\n\nBefore/after (`--before`: {args.before}, the same weights served by that "
            "checkout's code, timed at 1 client right after this checkout in every round):\n\n"
            + comparison
        )
    text = (
        f"Through HTTP (`attnserve serve`, {args.threads} torch thread(s), clients on the same "
        f"machine, histories as {how}), {args.seconds:g} s per phase in {args.rounds} "
        "round-robin rounds (every backend in each round, so drift of the host hits all alike); "
        "p50 at 1 client: one keep-alive `http.client` connection; overhead: the median of "
        "each of those requests' latency minus the server's x-inference-time-ms; in-process: "
        "one window's `predict` in the benchmark process, same thread count, median of "
        f"{IN_PROCESS_REPEATS} per round while the server idles; kept: the speed-up over flash "
        "through HTTP as a share of the in-process one (approximate backends). Peak memory = "
        "the server's resident memory above its level at the start of the backend's phases "
        "(the largest over the rounds). Test MSE from each checkpoint's quality.json. "
        f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores, torch {torch.__version__}; load "
        f"average before {load0}, after {load_average()} (other work shares this host).\n\n"
        + table(rows, default)
        + "\n\n"
        + gain_summary(rows)
        + "\n"
        + cheapest_summary(rows, default)
        + "\n"
        + auto_summary(rows)
        + comparison
        + "\n\nLoad average (1, 5, 15 min) at each round's start: "
        + "; ".join(loads)
        + f"\n\nRegenerate: `python -m benchmarks.forecast.trade{flag}`"
        + f" (this run: `{' '.join(['python -m benchmarks.forecast.trade', *given])}`)\n"
    )
    print(text)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.md')} and .json")


if __name__ == "__main__":
    main()
