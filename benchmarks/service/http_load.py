"""Service throughput and latency: the real server under concurrent clients, per backend.

    .venv/bin/python -m benchmarks.service [--clients 32] [--seconds 8] [--backends flash full]

For ``/encode`` (one short text per request, 8-24 words from the stdlib-docstring corpus) and
``/forecast`` (one ETTh1 test-split window per request) and each attention backend, three numbers:

* **server, batched**: ``attnserve serve`` in a subprocess (max batch 32), driven for
  ``--seconds`` by ``--clients`` concurrent ``httpx.AsyncClient`` s in a closed loop (each sends
  its next request when the last is answered); throughput and p50/p95/p99 client latency.
* **in-process**: the same model in this process, batches of 32 (tokenize/prepare included, as
  the server must), best of ``--repeats`` passes: the ceiling the server is compared with.
* **server, batching off**: the same server with ``--max-batch-size 1``.

``--device cuda`` runs the server and the in-process models on the GPU, the latter under the
server's own inference context (``DeviceRuntime``: inference mode, bf16/fp16 autocast where the
backend allows), so the two stay comparable.

With ``--workers N`` the server runs N processes (``attnserve serve --workers N``), and a fourth
number joins: N in-process copies of the model running at once, one per process, the machine's
ceiling for that server.

The last column, the same model in-process at batch 32 over batch 1, bounds what batching can
gain at all: where the model's cost grows with the rows (compute-bound on CPU), no batcher can
beat it.

``--precision float32 bfloat16`` measures something else instead: ``/encode`` in each precision
through one server loaded with all of them (``attnserve serve --precisions float32,bfloat16``,
max batch 32, ``--threads`` torch threads, OMP_WAIT_POLICY passive), each request naming its
``precision``, driven by the peers' lean raw-asyncio driver (:mod:`benchmarks.peers.driver`) at
``--clients`` and at 1 client, ``--rounds`` rounds with the precisions alternated (reversed every
other round, so drift hits all alike). req/s is the median over rounds, percentiles pool them,
and each round's ratio to the first precision is listed. The server's process tree is ended and
checked gone with psutil (:meth:`benchmarks.peers.servers.ServerProcess.stop`). Writes ``--out``.

Every phase runs alone (never two at once) with the same ``--threads`` torch threads. The
clients share the CPU with the server, so on a small machine they cost it throughput; the load
average before and after is printed, to flag contention from other processes. CPU time per
row (server process per request vs this process in-process) does not depend on contention: it
shows what the HTTP path adds to the model's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
TEXT_MODEL = "all-MiniLM-L6-v2"
BACKENDS = ("full", "flash", "probsparse", "performer", "nystrom")
BATCH = 32


# ----------------------------------------------------------------------------- workloads


def short_texts(n: int) -> list[str]:
    """``n`` texts of 8 to 24 words."""
    from models.text.corpus import word_windows

    pool = word_windows(n, 24)
    return [" ".join(t.split()[: 8 + (i * 7) % 17]) for i, t in enumerate(pool)]


def etth1_windows(context: int, n: int) -> list[dict[str, Any]]:
    """``n`` test-split histories of ``context`` rows (as request ``series`` items)."""
    from models.training.data import SPLIT_BORDERS, load_etth1

    index, values = load_etth1()
    start, end = SPLIT_BORDERS["test"]
    stride = max(1, (end - start - context) // n)
    out = []
    for k in range(n):
        lo = start - context + k * stride
        out.append(
            {
                "timestamps": [t.strftime("%Y-%m-%d %H:%M:%S") for t in index[lo : lo + context]],
                "values": values[lo : lo + context].round(3).tolist(),
            }
        )
    return out


@dataclass
class Workload:
    """Request bodies (pre-encoded JSON) for one task and backend."""

    path: str
    bodies: list[bytes]


def encode_workload(texts: list[str], backend: str) -> Workload:
    return Workload(
        "/encode",
        [json.dumps({"inputs": [t], "attention": backend}).encode() for t in texts],
    )


def forecast_workload(model: str, series: list[dict[str, Any]], backend: str) -> Workload:
    return Workload(
        "/forecast",
        [
            json.dumps({"model": model, "series": [s], "attention": backend}).encode()
            for s in series
        ],
    )


# ----------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m service serve`` on a free port."""

    def __init__(
        self,
        models: list[str],
        threads: int,
        max_batch_size: int,
        log: Path,
        workers: int = 1,
        device: str = "cpu",
        root: Path = ROOT,
        extra: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            sys.executable, "-m", "service", "serve",
            "--port", str(self.port),
            "--models", ",".join(models),
            "--device", device,
            "--torch-threads", str(threads),
            "--max-batch-size", str(max_batch_size),
            "--workers", str(workers),
            "--max-queue", "1024",
            "--log-level", "warning",
            *extra,
        ]  # fmt: skip
        self.log = log.open("w")
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen(args, cwd=root, env=env, stdout=self.log, stderr=self.log)

    def ready(self) -> bool:
        """One readiness probe (``GET /readyz``)."""
        return httpx.get(self.url + "/readyz", timeout=2).status_code == 200

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {self.log.name}")
            try:
                if self.ready():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"server not ready after {timeout} s; see {self.log.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# ----------------------------------------------------------------------------- load generation


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies_ms: list[float]
    batch_sizes: list[int] = field(default_factory=list)
    errors: int = 0
    server_cpu_s: float | None = None
    client_cpu_s: float | None = None

    def cpu_ms_per_request(self, which: str = "server") -> float:
        cpu = self.server_cpu_s if which == "server" else self.client_cpu_s
        return float("nan") if cpu is None or not self.requests else cpu * 1000 / self.requests

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.requests else float("nan")

    def pct(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def combined(parts: list[LoadResult]) -> LoadResult:
    """Several phases of the same workload as one result: requests, time, latencies, batch
    sizes and errors pooled (CPU times are left out: they were sampled per phase)."""
    return LoadResult(
        requests=sum(p.requests for p in parts),
        seconds=sum(p.seconds for p in parts),
        latencies_ms=[x for p in parts for x in p.latencies_ms],
        batch_sizes=[x for p in parts for x in p.batch_sizes],
        errors=sum(p.errors for p in parts),
    )


def cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU seconds so far of process ``pid`` and (``children``) its descendants:
    the workers of a ``--workers N`` server."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *(root.children(recursive=True) if children else [])]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


async def drive(
    url: str,
    work: Workload,
    clients: int,
    seconds: float,
    warmup: float,
    server_pid: int | None = None,
) -> LoadResult:
    """``clients`` closed-loop clients for ``warmup + seconds``; answers that arrive in the last
    ``seconds`` count. With ``server_pid``, also the server's and this process's CPU time over
    that window."""
    headers = {"content-type": "application/json"}
    latencies: list[float] = []
    batches: list[int] = []
    errors = 0
    counted = 0
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds

    async def client(k: int) -> None:
        nonlocal errors, counted
        async with httpx.AsyncClient(base_url=url, timeout=120) as c:
            i = k
            while True:
                sent = time.perf_counter()
                if sent >= stop_at:
                    return
                r = await c.post(
                    work.path, content=work.bodies[i % len(work.bodies)], headers=headers
                )
                done = time.perf_counter()
                i += clients
                if measure_from <= done <= stop_at:
                    if r.status_code != 200:
                        errors += 1
                        continue
                    counted += 1
                    latencies.append((done - sent) * 1000)
                    batches.append(int(r.headers.get("x-batch-size", "0")))

    cpu: dict[str, float] = {}

    async def sample_cpu() -> None:
        if server_pid is None:
            return
        me = os.getpid()
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        server0, client0 = cpu_seconds(server_pid), cpu_seconds(me, children=False)
        await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
        cpu["server"] = cpu_seconds(server_pid) - server0
        cpu["client"] = cpu_seconds(me, children=False) - client0

    await asyncio.gather(sample_cpu(), *(client(k) for k in range(clients)))
    return LoadResult(
        counted, seconds, latencies, batches, errors, cpu.get("server"), cpu.get("client")
    )


# ----------------------------------------------------------------------------- in-process


def rows_per_s(
    run: Callable[[list[Any]], object], rows: list[Any], batch: int, repeats: int
) -> tuple[float, float]:
    """Rows per second of ``run`` over ``rows`` in chunks of ``batch`` (best of ``repeats``) and
    CPU milliseconds per row (of that best pass)."""
    chunks = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    run(chunks[0])
    best, best_cpu = float("inf"), float("nan")
    for _ in range(repeats):
        started, cpu0 = time.perf_counter(), time.process_time()
        for chunk in chunks:
            run(chunk)
        elapsed = time.perf_counter() - started
        if elapsed < best:
            best, best_cpu = elapsed, (time.process_time() - cpu0) * 1000 / len(rows)
    return len(rows) / best, best_cpu


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


Runner = Callable[[list[Any], str], None]


def in_process_runners(work: InProcessWork) -> dict[str, tuple[Runner, list[Any]]]:
    """Per task, a ``run(chunk, backend)`` that does what the server does for those rows
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

        def run_text(chunk: list[Any], backend: str) -> None:
            with runtime.inference(backend):
                encoder.encode(chunk, backend=backend)

        runners["encode"] = (run_text, work.texts[:128])
    if work.forecast_model:
        forecaster = InformerForecaster.load(work.forecast_model, device=str(runtime.device))

        def run_forecast(chunk: list[Any], backend: str) -> None:
            windows = [forecaster.prepare(s["timestamps"], s["values"]) for s in chunk]
            with runtime.inference(backend):
                forecaster.predict(windows, backend)

        runners["forecast"] = (run_forecast, work.series[:128])
    return runners


def run_with(run: Runner, backend: str, chunk: list[Any]) -> None:
    """``run(chunk, backend)``, for :func:`functools.partial` over ``run`` and ``backend``."""
    run(chunk, backend)


def measure_in_process(work: InProcessWork) -> dict[tuple[str, str, int], tuple[float, float]]:
    """(rows/s, CPU ms/row) per (task, backend, batch size) for batch sizes 32 and 1."""
    out: dict[tuple[str, str, int], tuple[float, float]] = {}
    for task, (run, rows) in in_process_runners(work).items():
        for backend in work.backends:
            for batch in (BATCH, 1):
                out[(task, backend, batch)] = rows_per_s(
                    partial(run_with, run, backend), rows, batch, work.repeats
                )
    return out


def _parallel_member(work: InProcessWork, barrier: Any, results: Any) -> None:
    """One of :func:`measure_in_process_parallel`'s processes: load, then for each backend wait
    for the others and run the batch-32 passes; report."""
    out: dict[tuple[str, str], float] = {}
    for task, (run, rows) in in_process_runners(work).items():
        for backend in work.backends:
            barrier.wait()  # every process runs the same task and backend at the same time
            out[(task, backend)] = rows_per_s(
                partial(run_with, run, backend), rows, BATCH, work.repeats
            )[0]
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


# ----------------------------------------------------------------------------- precisions


def precision_rounds(args: argparse.Namespace) -> str:
    """``/encode`` per precision through one server (``--precision``, lean driver, alternated
    rounds); the results page in Markdown."""
    import dataclasses
    import math
    from datetime import UTC, datetime

    from benchmarks.host import cpu_model
    from benchmarks.peers import driver
    from benchmarks.peers.servers import HOST, PEERS, Launch
    from benchmarks.peers.servers import ServerProcess as TreeProcess
    from benchmarks.peers.servers import free_port as free_host_port

    precisions: list[str] = args.precision
    base = PEERS["attnserve"]
    peer = dataclasses.replace(
        base,
        command=lambda launch: [*base.command(launch), "--precisions", ",".join(precisions)],
    )
    launch = Launch(
        free_host_port(), args.threads, ROOT, Path(sys.executable), Path(sys.executable),
        Path(sys.executable),
    )  # fmt: skip
    texts = short_texts(512)
    requests = {
        p: [
            driver.build_request(
                HOST, launch.port, "/encode", json.dumps({"inputs": t, "precision": p}).encode()
            )
            for t in texts
        ]
        for p in precisions
    }
    counts = sorted({args.clients, 1}, reverse=True)
    runs: dict[tuple[str, int], list[driver.LoadResult]] = {}
    loads: dict[tuple[str, int], list[tuple[str, str]]] = {}
    checks: dict[str, float] = {}
    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    log = Path(args.log_dir) / "service-bench-precision.log"
    server = TreeProcess(peer, launch, log)
    try:
        started = time.monotonic()
        reference = server.wait_answering(texts[0])
        startup = time.monotonic() - started
        for p in precisions:  # each answers, in the precision asked, the same text alike
            status, body = driver.call_once(HOST, launch.port, requests[p][0], timeout=30)
            answer = json.loads(body)
            if status != 200 or answer.get("precision") != p:
                raise RuntimeError(f"{p}: HTTP {status} {body[:200]!r}")
            got = answer["embeddings"][0]
            dot = sum(a * b for a, b in zip(got, reference, strict=True))
            checks[p] = dot / math.sqrt(sum(a * a for a in got) * sum(b * b for b in reference))
        for k in range(args.rounds):
            order = precisions if k % 2 == 0 else precisions[::-1]
            for clients in counts:
                for p in order:
                    before = load_average()
                    result = driver.run_load(
                        HOST, launch.port, requests[p], clients, args.seconds, args.warmup,
                        {"server": server.cpu_seconds},
                    )  # fmt: skip
                    runs.setdefault((p, clients), []).append(result)
                    loads.setdefault((p, clients), []).append((before, load_average()))
                    errors = f"  errors {dict(result.errors)}" if result.errors else ""
                    print(
                        f"  round {k + 1} {p:>9} x{clients:<3} {result.throughput:7.1f} req/s  "
                        f"p50 {result.pct(50):6.1f}  p99 {result.pct(99):6.1f} ms  load "
                        f"{before} -> {loads[(p, clients)][-1][1]}{errors}",
                        flush=True,
                    )
    finally:
        stopped = server.stop()
        print(
            f"server stopped: {stopped.processes} process(es), gone after {stopped.signal} in "
            f"{stopped.seconds:.1f} s (psutil finds none left)",
            flush=True,
        )
    load_after = load_average()

    first = precisions[0]
    lines = [
        f"# /encode per precision through HTTP ({datetime.now(UTC):%Y-%m-%d %H:%M UTC})",
        "",
        f"`python -m benchmarks.service {' '.join(args.argv)}`",
        "",
        f"One server, `attnserve serve --models {TEXT_MODEL} --precisions {','.join(precisions)}"
        f" --torch-threads {args.threads} --max-batch-size 32` (max wait 5 ms, attention flash, "
        f"OMP_WAIT_POLICY=PASSIVE; ready in {startup:.1f} s), each request one text of 8-24 "
        f"words ({len(texts)} distinct) naming its `precision`; the lean raw-asyncio driver "
        "(`benchmarks/peers/driver.py`), closed-loop keep-alive clients, "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per run; {args.rounds} rounds, "
        "the precisions alternated (order reversed every other round). req/s: median over "
        "rounds; percentiles: all rounds pooled. CPU: "
        f"{cpu_model()}, {os.cpu_count()} logical CPUs, shared with other benchmarks during the "
        f"run: load average (1, 5, 15 min) before {load_before}, after {load_after}. Server "
        f"stopped with {stopped.signal}; psutil found none of its {stopped.processes} "
        "process(es) left. Cosine of each precision's first answer to the default's: "
        + ", ".join(f"{p} {c:.5f}" for p, c in checks.items())
        + ".",
        "",
        f"| precision | clients | req/s (median) | per round | x {first} (per round) | "
        "p50 / p95 / p99 ms | server CPU ms/req | errors | load average before -> after |",
        "|---|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for clients in counts:
        for p in precisions:
            res = runs[(p, clients)]
            pooled = [x for r in res for x in r.latencies_ms]
            rps = statistics.median(r.throughput for r in res)
            ratios = [
                r.throughput / b.throughput
                for r, b in zip(res, runs[(first, clients)], strict=True)
            ]
            cpu = (
                sum(r.cpu_s.get("server", 0.0) for r in res)
                * 1000
                / max(1, sum(r.requests for r in res))
            )
            q = [driver.percentile(pooled, x) for x in (50, 95, 99)]
            lines.append(
                f"| {p} | {clients} | {rps:.1f} | "
                + ", ".join(f"{r.throughput:.1f}" for r in res)
                + f" | {statistics.median(ratios):.2f}x ("
                + ", ".join(f"{x:.2f}" for x in ratios)
                + f") | {q[0]:.1f} / {q[1]:.1f} / {q[2]:.1f} | {cpu:.2f} | "
                + f"{sum(r.error_count for r in res)} | "
                + "; ".join(f"{a} -> {b}" for a, b in loads[(p, clients)])
                + " |"
            )
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_server_phase(
    label: str,
    models: list[str],
    workloads: dict[tuple[str, str], Workload],
    args: argparse.Namespace,
    max_batch_size: int,
    seconds: float,
) -> dict[tuple[str, str], LoadResult]:
    log = Path(args.log_dir) / f"service-bench-{label}.log"
    server = ServerProcess(models, args.threads, max_batch_size, log, args.workers, args.device)
    results = {}
    try:
        server.wait_ready()
        for key, work in workloads.items():
            result = asyncio.run(
                drive(server.url, work, args.clients, seconds, args.warmup, server.proc.pid)
            )
            results[key] = result
            print(
                f"  {label:>9} {key[0]:>8} {key[1]:>10}: {result.throughput:7.1f} req/s  "
                f"p50 {result.pct(50):6.1f} ms  p99 {result.pct(99):6.1f} ms  "
                f"batch {statistics.fmean(result.batch_sizes or [0]):4.1f}  "
                f"cpu server {result.cpu_ms_per_request():5.2f} / client "
                f"{result.cpu_ms_per_request('client'):5.2f} ms/req  errors {result.errors}",
                flush=True,
            )
    finally:
        server.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--unbatched-seconds", type=float, default=5.0)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--tasks", nargs="+", default=["encode", "forecast"])
    parser.add_argument("--forecast-model", default="informer-etth1-h24")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per process (0: default)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes; above 1 also measures that many in-process copies at once",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="where the server and the in-process models run (cuda: with the server's autocast)",
    )
    parser.add_argument("--log-dir", default="/tmp")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--precision",
        nargs="+",
        choices=["float32", "bfloat16", "int8"],
        help="instead: /encode in each of these precisions through one server loaded with all "
        "of them, lean driver, at --clients and 1 client, --rounds alternated rounds",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --precision")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "precision-http-cpu.md",
        help="with --precision: the results page",
    )
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.precision:
        page = precision_rounds(args)
        print()
        print(page)
        args.out.write_text(page)
        return
    if args.workers > 1 and args.device != "cpu":
        parser.error("--workers above 1 runs on CPU only (one process owns a GPU)")

    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
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
            workloads[("encode", backend)] = encode_workload(texts, backend)
        if forecast_model:
            workloads[("forecast", backend)] = forecast_workload(forecast_model, series, backend)

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
    lines = [
        f"{args.clients} concurrent clients, one text / one series per request, "
        f"{args.workers} server worker process(es), device {args.device}, torch threads "
        f"{args.threads} per process, {os.cpu_count()} CPUs; load average before {load_before}, "
        f"after {load_after}.",
        "",
        "| task | backend | server req/s | p50 / p95 / p99 ms | mean batch | in-process rows/s "
        "(batch 32, 1 process) | vs in-process | batching-off req/s (p50 / p99 ms) | "
        "vs batching-off | in-process batch 32 / 1 | CPU ms per row: server / in-process |"
        + (f" in-process x{args.workers} rows/s | vs that |" if in_parallel else ""),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        + ("---:|---:|" if in_parallel else ""),
    ]
    record = []
    for key in workloads:
        b, u = batched[key], unbatched[key]
        (ip, ip_cpu), (ip1, _) = in_proc.get((*key, BATCH), nan), in_proc.get((*key, 1), nan)
        mean_batch = statistics.fmean(b.batch_sizes or [0])
        lines.append(
            f"| {key[0]} | {key[1]} | {b.throughput:.1f} | {b.pct(50):.0f} / {b.pct(95):.0f} / "
            f"{b.pct(99):.0f} | {mean_batch:.1f} | {ip:.1f} | {b.throughput / ip:.2f}x | "
            f"{u.throughput:.1f} ({u.pct(50):.0f} / {u.pct(99):.0f}) | "
            f"{b.throughput / u.throughput:.2f}x | {ip / ip1:.2f}x | "
            f"{b.cpu_ms_per_request():.2f} / {ip_cpu:.2f} |"
            + (
                f" {in_parallel[key]:.1f} | {b.throughput / in_parallel[key]:.2f}x |"
                if in_parallel
                else ""
            )
        )
        record.append(
            {
                "task": key[0],
                "backend": key[1],
                "server_rps": b.throughput,
                "p50_ms": b.pct(50),
                "p95_ms": b.pct(95),
                "p99_ms": b.pct(99),
                "mean_batch": mean_batch,
                "server_cpu_ms_per_request": b.cpu_ms_per_request(),
                "client_cpu_ms_per_request": b.cpu_ms_per_request("client"),
                "in_process_rows_per_s": ip,
                "in_process_cpu_ms_per_row": ip_cpu,
                "in_process_batch1_rows_per_s": ip1,
                "in_process_parallel_rows_per_s": in_parallel.get(key),
                "unbatched_rps": u.throughput,
                "unbatched_p50_ms": u.pct(50),
                "unbatched_p99_ms": u.pct(99),
                "errors": b.errors + u.errors,
            }
        )
    table = "\n".join(lines)
    print()
    print(table)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "workers": args.workers,
                    "device": args.device,
                    "threads": args.threads,
                    "clients": args.clients,
                    "load_before": load_before,
                    "load_after": load_after,
                    "rows": record,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
