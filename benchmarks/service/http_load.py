"""Service throughput and latency: the real server under concurrent clients, per backend.

    .venv/bin/python -m benchmarks.service.http_load [--clients 32] [--seconds 8] [--backends flash full]

For ``/encode`` (one short text per request) and ``/forecast`` (one ETTh1 test window per
request), per attention backend, each phase alone with the same ``--threads``:

* **server, batched**: ``attnserve serve`` (max batch 32) under ``--clients`` closed-loop
  keep-alive clients (:mod:`benchmarks.harness.load`): throughput, p50/p95/p99 latency;
* **in-process**: the same model in this process at batch 32 (tokenize/prepare included, under
  the server's ``DeviceRuntime`` inference context on ``--device cuda``), best of ``--repeats``:
  the ceiling the server is compared with; batch 32 over batch 1 bounds what batching can gain;
* **server, batching off**: the same server with ``--max-batch-size 1``;
* with ``--workers N``: N in-process copies at once, one per process (that server's ceiling).

The clients share the CPU with the server; the load average before and after flags contention,
and CPU time per row (server vs in-process), which contention does not change, shows what the
HTTP path adds. :mod:`.precision_http` measures per precision instead. ``--smoke``: flash only,
4 clients, a second per phase.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.load import LoadResult
from benchmarks.harness.process import TEXT_MODEL, attnserve
from benchmarks.harness.report import table as markdown_table
from benchmarks.harness.report import write_json
from benchmarks.harness.timing import rows_per_s
from benchmarks.service import common
from benchmarks.service.common import drive_each
from benchmarks.service.workloads import Workload, etth1_windows, short_texts, workload
from models.names import BACKEND_NAMES as BACKENDS

BATCH = 32


# ----------------------------------------------------------------------------- in-process


@dataclass(frozen=True)
class InProcessWork:
    """What the in-process measurements run: the rows of each task, the backends, and how."""

    texts: list[str]
    series: list[dict[str, Any]]
    forecast_model: str | None
    backends: list[str]
    threads: int
    repeats: int
    device: str = "cpu"


Runner = Callable[[str, list[Any]], None]  # run(backend, chunk)


def in_process_runners(work: InProcessWork) -> dict[str, tuple[Runner, list[Any]]]:
    """Per task, a ``run(backend, chunk)`` that does what the server does for those rows
    (tokenize or prepare, then the model under the server's inference context: inference
    mode, and bf16/fp16 autocast on CUDA), and the rows to run; models loaded on the device."""
    import torch

    from models.informer import InformerForecaster
    from models.text import SentenceEncoder
    from service.engine.batching.device import DeviceRuntime, select_device

    if work.threads:
        torch.set_num_threads(work.threads)
    runtime = DeviceRuntime(select_device(work.device))
    runners: dict[str, tuple[Runner, list[Any]]] = {}
    if work.texts:
        encoder = SentenceEncoder.load(device=runtime.device)

        def run_text(backend: str, chunk: list[Any]) -> None:
            with runtime.inference(backend):
                encoder.encode(chunk, backend=backend)

        runners["encode"] = (run_text, work.texts[:128])
    if work.forecast_model:
        forecaster = InformerForecaster.load(work.forecast_model, device=str(runtime.device))

        def run_forecast(backend: str, chunk: list[Any]) -> None:
            windows = [forecaster.prepare(s["timestamps"], s["values"]) for s in chunk]
            with runtime.inference(backend):
                forecaster.predict(windows, backend)

        runners["forecast"] = (run_forecast, work.series[:128])
    return runners


def measure_in_process(work: InProcessWork) -> dict[tuple[str, str, int], tuple[float, float]]:
    """(rows/s, CPU ms/row) per (task, backend, batch size) for batch sizes 32 and 1."""
    out: dict[tuple[str, str, int], tuple[float, float]] = {}
    for task, (run, rows) in in_process_runners(work).items():
        for backend in work.backends:
            for batch in (BATCH, 1):
                out[(task, backend, batch)] = rows_per_s(
                    partial(run, backend), rows, batch, work.repeats
                )
    return out


def _parallel_member(work: InProcessWork, barrier: Any, results: Any) -> None:
    """One of :func:`measure_in_process_parallel`'s processes: load, then for each backend wait
    for the others and run the batch-32 passes; report."""
    out: dict[tuple[str, str], float] = {}
    for task, (run, rows) in in_process_runners(work).items():
        for backend in work.backends:
            barrier.wait()  # every process runs the same task and backend at the same time
            out[(task, backend)] = rows_per_s(partial(run, backend), rows, BATCH, work.repeats)[0]
    results.put(out)


def measure_in_process_parallel(
    processes: int, work: InProcessWork
) -> dict[tuple[str, str], float]:
    """Rows/s at batch 32 of ``processes`` copies of the model running at once, one per process
    (summed): the machine's ceiling for a server with that many workers (CPU)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_parallel_member, args=(work, barrier, results))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    parts = [results.get(timeout=1800) for _ in procs]
    for proc in procs:
        proc.join()
    return {key: sum(part[key] for part in parts) for key in parts[0]}


# ----------------------------------------------------------------------------- main


def run_server_phase(
    label: str,
    models: list[str],
    workloads: dict[tuple[str, str], Workload],
    args: argparse.Namespace,
    max_batch_size: int,
    seconds: float,
) -> dict[tuple[str, str], LoadResult]:
    """Start the server (``max_batch_size``) and drive each workload for ``seconds``."""
    log = args.log_dir / f"service-bench-{label}.log"
    server = attnserve(models, args.threads, max_batch_size, log, args.workers, args.device)
    return drive_each(server, workloads, args.clients, seconds, args.warmup, f"{label:>9}")


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.threads(1, "torch threads per process (0: default)"),
        cli.repeats(3),
        common.load_options(8.0),
        cli.names("--backends", BACKENDS, choices=BACKENDS),
        cli.names("--tasks", ["encode", "forecast"]),
    )
    parser.add_argument("--unbatched-seconds", type=float, default=5.0)
    parser.add_argument("--forecast-model", default="informer-etth1-h24")
    parser.add_argument("--workers", type=int, default=1, help="server processes (see above)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="(see above)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = cli.parse(
        parser, argv, **common.SMOKE, unbatched_seconds=1.0, backends=["flash"], repeats=1
    )
    if args.workers > 1 and args.device != "cpu":
        parser.error("--workers above 1 runs on CPU only (one process owns a GPU)")

    load_before = common.load_before()
    texts = short_texts(512) if "encode" in args.tasks else []
    forecast_model = args.forecast_model if "forecast" in args.tasks else None
    series: list[dict[str, Any]] = []
    models = [TEXT_MODEL] if "encode" in args.tasks else []
    if forecast_model:
        from models.informer import InformerForecaster

        context = InformerForecaster.load(forecast_model).context
        series = etth1_windows(context, 256)
        models.append(forecast_model)
    workloads: dict[tuple[str, str], Workload] = {}
    for backend in args.backends:
        if "encode" in args.tasks:
            workloads[("encode", backend)] = workload("/encode", texts, backend)
        if forecast_model:
            workloads[("forecast", backend)] = workload(
                "/forecast", series, backend, model=forecast_model
            )

    print("in-process (batches of 32 and of 1) ...", flush=True)
    work = InProcessWork(
        texts, series, forecast_model, args.backends, args.threads, args.repeats, args.device
    )
    in_proc = measure_in_process(work)
    for (task, backend, batch), (rate, cpu) in in_proc.items():
        print(
            f"  in-process {task:>8} {backend:>10} batch {batch:>2}: {rate:7.1f} rows/s  "
            f"cpu {cpu:5.2f} ms/row",
            flush=True,
        )
    in_parallel: dict[tuple[str, str], float] = {}
    if args.workers > 1:
        print(f"in-process, {args.workers} processes at once (batches of 32) ...", flush=True)
        in_parallel = measure_in_process_parallel(args.workers, work)
        for (task, backend), rate in in_parallel.items():
            print(f"  in-process x{args.workers} {task:>8} {backend:>10}: {rate:7.1f} rows/s")
    print(f"server, batching on (max batch {BATCH}) ...", flush=True)
    batched = run_server_phase("batched", models, workloads, args, BATCH, args.seconds)
    print("server, batching off (max batch 1) ...", flush=True)
    unbatched = run_server_phase("unbatched", models, workloads, args, 1, args.unbatched_seconds)
    load_after = load_average()

    nan = (float("nan"), float("nan"))
    record: list[dict[str, Any]] = []
    for (task, backend), b in batched.items():
        u = unbatched[(task, backend)]
        (ip, ip_cpu), (ip1, _) = (
            in_proc.get((task, backend, BATCH), nan),
            in_proc.get((task, backend, 1), nan),
        )
        record.append({
            "task": task, "backend": backend, "server_rps": b.throughput,
            "p50_ms": b.pct(50), "p95_ms": b.pct(95), "p99_ms": b.pct(99),
            "mean_batch": statistics.fmean(b.batch_sizes or [0]),
            "server_cpu_ms_per_request": b.cpu_ms_per_request(),
            "client_cpu_ms_per_request": b.cpu_ms_per_request("driver"),
            "in_process_rows_per_s": ip, "in_process_cpu_ms_per_row": ip_cpu,
            "in_process_batch1_rows_per_s": ip1,
            "in_process_parallel_rows_per_s": in_parallel.get((task, backend)),
            "unbatched_rps": u.throughput, "unbatched_p50_ms": u.pct(50),
            "unbatched_p99_ms": u.pct(99), "errors": b.error_count + u.error_count,
        })  # fmt: skip
    columns = [
        "task", "backend", "server req/s", "p50 / p95 / p99 ms", "mean batch",
        "in-process rows/s (batch 32, 1 process)", "vs in-process",
        "batching-off req/s (p50 / p99 ms)", "vs batching-off", "in-process batch 32 / 1",
        "CPU ms per row: server / in-process",
    ]  # fmt: skip
    if in_parallel:
        columns += [f"in-process x{args.workers} rows/s", "vs that"]
    rows = []
    for r in record:
        rps, ip, par = (
            r["server_rps"],
            r["in_process_rows_per_s"],
            r["in_process_parallel_rows_per_s"],
        )
        rows.append([
            r["task"], r["backend"], f"{rps:.1f}",
            f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['p99_ms']:.0f}", f"{r['mean_batch']:.1f}",
            f"{ip:.1f}", f"{rps / ip:.2f}x",
            f"{r['unbatched_rps']:.1f} ({r['unbatched_p50_ms']:.0f} / {r['unbatched_p99_ms']:.0f})",
            f"{rps / r['unbatched_rps']:.2f}x", f"{ip / r['in_process_batch1_rows_per_s']:.2f}x",
            f"{r['server_cpu_ms_per_request']:.2f} / {r['in_process_cpu_ms_per_row']:.2f}",
            *([f"{par:.1f}", f"{rps / par:.2f}x"] if in_parallel else []),
        ])  # fmt: skip
    lines = [
        f"{args.clients} concurrent clients, one text / one series per request, "
        f"{args.workers} server worker process(es), device {args.device}, torch threads "
        f"{args.threads} per process, {os.cpu_count()} CPUs; load average before {load_before}, "
        f"after {load_after}.",
        "",
        markdown_table(columns, rows, "ll" + "r" * (len(columns) - 2)),
    ]
    table = "\n".join(lines)
    print()
    print(table)
    if args.json:
        write_json(
            args.json,
            {
                "workers": args.workers,
                "device": args.device,
                "threads": args.threads,
                "clients": args.clients,
                "load_before": load_before,
                "load_after": load_after,
                "rows": record,
            },
        )


if __name__ == "__main__":
    main()
