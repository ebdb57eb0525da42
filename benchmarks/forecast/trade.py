"""The attention trade through HTTP: for each long-context forecaster and each backend, what a
request costs (latency, throughput, memory) beside what it is worth (test MSE).

    python -m benchmarks.forecast.trade                    # the shipped ETTm1 context-2048 models
    python -m benchmarks.forecast.trade --models informer-ettm1-h96-c2048 --seconds 20
    python -m benchmarks.forecast.trade --payload columns  # histories as JSON numbers

Per model, one ``attnserve serve`` process (only that model, batches of up to 32); per backend,
phases of ``--seconds`` each in total, split into ``--rounds`` round-robin rounds (a slow spell
of a shared machine hits every backend alike), ``--threads`` torch threads (default: the usable
cores) in ``--workers`` processes (default one): p50 at 1 keep-alive ``http.client`` client
(consecutive ETTm1 test-split windows, ``--payload``: base64 float32 columns or JSON numbers)
and each request's latency minus the server's ``x-inference-time-ms``; one window's
:meth:`~models.informer.InformerForecaster.predict` in this process while the server idles (the
speed-up over ``flash`` before any HTTP); requests/s at 8 clients (the capacity a backend buys,
beside the one-request latency); the server's busy cores in both phases; its peak resident
memory above its level at the phase's start (sampled every 10 ms); test MSE from the
checkpoint's ``quality.json`` beside the linear baseline's. The page states how each is taken.

Each option variant scored in ``quality.json`` (``attnserve evaluate --variants``) gets a row,
sent with its ``attention_options`` (``--no-variants``: none); ``auto`` (in ``--backends`` by
default) gets one at ``max_quality_loss`` ``--auto-budget``, set against the fastest fixed
backend within that budget and against ``flash``. The load average is recorded at every round's start.

Writes ``benchmarks/results/forecast-trade.{md,json,png}`` (``--out``; tables and plot:
:mod:`benchmarks.forecast.trade_report`). ``--smoke``: one model, flash and auto, 1 s phases.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from functools import partial
from pathlib import Path
from statistics import fmean
from typing import Any

import httpx
import psutil
import torch

from benchmarks.forecast import trade_report
from benchmarks.forecast.common import KeepAlive, series, test_windows
from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.load import HOST, LoadResult, build_request, combined, run_load
from benchmarks.harness.process import attnserve
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.timing import samples
from models.attention import get_backend
from models.informer import InformerForecaster
from models.informer.checkpoint import shipped_dirs
from models.names import BACKEND_NAMES, DEFAULT_PRECISION
from models.quality_file import backends_of, precision_figures, read_quality
from models.quality_loss import forecast_losses, forecast_variant_losses, variant_label
from service.http.schemas.forecast import ForecastRequest

LONG_MODELS = ("informer-ettm1-h96-c2048", "informer-ettm1-h288-c2048")
PAYLOADS = ("base64", "columns")
# predict() calls per backend and round for the in-process figure.
IN_PROCESS_REPEATS = 5


class PeakRss:
    """Samples the resident memory of a process and its descendants (a ``--workers N`` server's
    workers) every ``interval`` seconds in a thread."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.base = self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        """The tree's resident bytes now."""
        total = 0
        for proc in [self.proc, *self.proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def extra_mib(self) -> float:
        """The peak above the level at the start, in MiB."""
        return (self.peak - self.base) / 2**20


def one_client(
    url: str, bodies: list[bytes], seconds: float, warmup: float
) -> tuple[LoadResult, list[float]]:
    """One closed-loop keep-alive client for ``warmup + seconds``: the answers of the last
    ``seconds`` with their latencies, and each one's latency minus the server's inference
    time."""
    client = KeepAlive(url)
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
    return LoadResult(len(latencies), seconds, latencies), overheads


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
        for backend, entry in backends_of(quality).items()
    }
    # By label, not by position: a variant without a loss (no exact figure) is still measured.
    variant_losses = {variant_label(b, o): loss for b, o, loss in forecast_variant_losses(quality)}
    for entry in (precision_figures(quality, DEFAULT_PRECISION) or {}).get("variants") or []:
        label = variant_label(entry["backend"], entry["options"])
        runs[label] = {
            "attention": entry["backend"],
            "options": entry["options"],
            "figures": entry,
            "loss": variant_losses.get(label),
        }
    return runs


def auto_reason(url: str, body: bytes) -> str | None:
    """Send one request (it must succeed): its ``x-attention-choice`` header, which ``auto``
    requests get (the variant it ran and why); None for a fixed backend."""
    r = httpx.post(
        f"{url}/forecast", content=body, headers={"content-type": "application/json"}, timeout=60
    )
    r.raise_for_status()
    return r.headers.get("x-attention-choice")


def measure_model(model: str, args: Any, loads: list[str]) -> list[dict[str, Any]]:
    """One model's rows: every backend (and variant, and ``auto``) through HTTP and in process,
    in round-robin rounds."""
    directory = shipped_dirs().get(model) or Path(model)
    quality = read_quality(directory / "quality.json")
    runs = measured_runs(quality)
    channels, histories = test_windows(directory, 64)
    windows = [series(stamps, values, channels, args.payload) for stamps, values in histories]
    labels = [b for b in args.backends if b != "auto"]
    if args.variants:  # each measured variant beside the backends, auto last
        labels += [label for label in runs if label not in BACKEND_NAMES]
    labels += [b for b in args.backends if b == "auto"]
    forecaster = InformerForecaster.load(str(directory))
    request = ForecastRequest.model_validate({"model": directory.name, "series": windows[:1]})
    window = forecaster.prepare(**request.series[0].packed())
    log = args.log_dir / f"trade-{directory.name}.log"
    server = attnserve([str(directory)], args.threads, 32, log, workers=args.workers)
    rows = []
    try:
        server.wait_ready()
        prepared = {}
        for label in labels:
            run = runs.get(label, {"attention": label, "options": {}})
            extra: dict[str, Any] = {}
            if label == "auto":
                extra["max_quality_loss"] = args.auto_budget
            elif run["options"]:
                extra["attention_options"] = run["options"]
            bodies = [
                json.dumps(
                    {"model": directory.name, "series": [s], "attention": run["attention"], **extra}
                ).encode()
                for s in windows
            ]
            reason = auto_reason(server.url, bodies[0])
            # What ran, as measured_runs names it: a fixed request's own label (the response
            # names only the backend); for auto the header's, which names the variant.
            ran = label if reason is None else reason.split(";", 1)[0]
            # In process: what ran (auto: the variant it chose), at the request's options.
            ran_run = runs.get(ran, run)
            backend = ran_run["attention"]
            predict = partial(forecaster.predict, [window], backend, dict(ran_run["options"]))
            prepared[label] = (bodies, ran, reason, backend, predict)
        ones: dict[str, list[LoadResult]] = {label: [] for label in labels}
        eights: dict[str, list[LoadResult]] = {label: [] for label in labels}
        local: dict[str, list[float]] = {label: [] for label in labels}
        overheads: dict[str, list[float]] = {label: [] for label in labels}
        peaks: dict[str, float] = dict.fromkeys(labels, 0.0)
        # The server's CPU and wall seconds per label at 1 and at 8 clients: its busy cores.
        busy: dict[str, list[float]] = {label: [0.0] * 4 for label in labels}
        probes = {"server": server.cpu_seconds}
        share = args.seconds / args.rounds
        for round_ in range(args.rounds):
            loads.append(f"{directory.name} round {round_ + 1}: {load_average()}")
            for label in labels:
                bodies, _ran, _reason, _backend, predict = prepared[label]
                warm = 2.0 if round_ == 0 else 0.5
                timed = samples(predict, IN_PROCESS_REPEATS, warmup=int(round_ == 0))
                local[label] += [s * 1e3 for s in timed]
                requests = [build_request(HOST, server.port, "/forecast", b) for b in bodies]
                with PeakRss(server.proc.pid) as mem:
                    cpu, wall = server.cpu_seconds(), time.perf_counter()
                    one_run, over = one_client(server.url, bodies, share, warm)
                    busy[label][0] += server.cpu_seconds() - cpu
                    busy[label][1] += time.perf_counter() - wall
                    ones[label].append(one_run)
                    overheads[label] += over
                    eight_run = run_load(HOST, server.port, requests, 8, share, warm, probes)
                    busy[label][2] += eight_run.cpu_s["server"]
                    busy[label][3] += eight_run.seconds
                    eights[label].append(eight_run)
                peaks[label] = max(peaks[label], mem.extra_mib)
        for label in labels:
            _bodies, ran, reason, backend, _predict = prepared[label]
            one, eight = combined(ones[label]), combined(eights[label])
            q = runs.get(ran, {}).get("figures") or {}
            rows.append(
                {
                    "model": directory.name,
                    "backend": label,
                    "ran": ran,
                    "choice": reason,
                    "quality_loss": runs.get(ran, {}).get("loss"),
                    "budget": args.auto_budget if label == "auto" else None,
                    "approximate": not get_backend(backend).exact,
                    "p50_ms_1_client": one.pct(50),
                    "overhead_p50_ms": trade_report.median(overheads[label]),
                    "in_process_ms": trade_report.median(local[label]),
                    "requests_per_s_8_clients": eight.throughput,
                    "mean_batch_8_clients": fmean(eight.batch_sizes or [float("nan")]),
                    "server_cores_1_client": busy[label][0] / busy[label][1],
                    "server_cores_8_clients": busy[label][2] / busy[label][3],
                    "peak_extra_mib": peaks[label],
                    "errors": one.error_count + eight.error_count,
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
    return rows


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.names("--models", LONG_MODELS),
        cli.names("--backends", [*BACKEND_NAMES, "auto"]),
        cli.seconds(12.0, "per phase, over all rounds"),
        cli.rounds(3, "split each phase into this many rounds, every backend in each"),
        cli.threads(torch.get_num_threads(), "torch threads (default: the usable cores)"),
        cli.out(None, "default: results/forecast-trade[-PAYLOAD]"),
    )
    p.add_argument("--auto-budget", type=float, default=0.1, help="max_quality_loss for auto")
    p.add_argument(
        "--workers", type=int, default=1, help="server processes (0: the server's own default)"
    )
    p.add_argument("--payload", choices=PAYLOADS, default="base64", help="how histories travel")
    p.add_argument(
        "--no-variants",
        dest="variants",
        action="store_false",
        help="leave out the option variants scored in quality.json (measured by default)",
    )
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"), help="server logs go here")
    args = cli.parse(
        p, argv, models=LONG_MODELS[:1], backends=["flash", "auto"], seconds=1.0, rounds=1,
        variants=False,
    )  # fmt: skip
    if args.out is None:
        suffix = "" if args.payload == "base64" else f"-{args.payload}"
        args.out = RESULTS / f"forecast-trade{suffix}"
    torch.set_num_threads(args.threads)  # the in-process figures: as the server runs
    report = Report("benchmarks.forecast.trade", argv)
    loads: list[str] = []
    rows: list[dict[str, Any]] = []
    default = {}
    for model in args.models:
        directory = shipped_dirs().get(model) or Path(model)
        quality = json.loads((directory / "quality.json").read_text())
        default[directory.name] = quality["default_backend"]
        rows += measure_model(model, args, loads)
    trade_report.write(report, rows, default, loads, args, IN_PROCESS_REPEATS)


if __name__ == "__main__":
    main()
