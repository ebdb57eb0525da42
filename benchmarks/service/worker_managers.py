"""Our supervisor against the standard worker managers: ``attnserve serve --workers 2``, gunicorn
with uvicorn workers and uvicorn's own ``--workers``, on speed and on the behaviours
``tests/service/test_workers.py`` asks of ours.

    .venv/bin/python -m benchmarks.worker_managers [--rounds 2] [--seconds 10] [--clients 32]

Every manager runs two workers serving all-MiniLM-L6-v2 on CPU with one torch thread each, with
the same uvicorn settings and header guard (the two standard ones through the adapter
:mod:`benchmarks.worker_managers_app`) and prometheus-client's multiprocess mode (ours makes its
directory; for the others this script makes a fresh one, as their deployer would have to).

In each of ``--rounds`` rounds every manager in turn (the order reversed every other round, so
drift hits all alike) is started, and once both workers answer:

1. **speed**: ``--clients`` closed-loop keep-alive clients (:mod:`benchmarks.peers.driver`), one
   short text per ``/encode``, ``--warmup`` s then ``--seconds`` s measured; with it how the
   connections split among the workers, the mean batch, and the 1-minute load average at its
   start;
2. first round only: **metrics** (64 requests on fresh connections, then every scrape's
   ``attnserve_requests_total`` must have grown by 64, whichever worker answers it) and the
   **header limit** (a request with 20 kB of headers must get our 431);
3. **SIGKILL** of one worker under the same load (fresh connections every 2 s, so the load can
   reach a replacement): the requests that failed, the seconds until a process that was not
   serving before the kill answers a probe on a fresh connection, the throughput after that
   against before, and whether ``attnserve_requests_in_flight`` is back to 0 once idle (a dead
   worker's live gauges must stop counting);
4. first round: **SIGTERM** to the manager with 192 long texts admitted: how many were answered,
   what new requests and ``/readyz`` (on fresh connections, every 0.25 s until the manager exits)
   get, exit status and time; later rounds: **SIGKILL of the manager**: do its workers exit on
   their own (and when)?

Then once per manager a **start-up failure** (an unknown model): exit status and time. Writes
``benchmarks/results/worker-managers-cpu.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.host import cpu_model, load_average
from benchmarks.peers.driver import LoadResult, build_request, drive, run_load
from benchmarks.peers.servers import HOST, MODEL, ROOT, free_port, server_env
from service.settings import Settings

RESULTS = Path(__file__).parent / "results"
ADAPTER = "benchmarks.worker_managers_app"
WORKERS = 2
GRACE_S = Settings().shutdown_grace_s
CHUNK_S = 2.0  # the kill scenario's load reconnects this often
RECOVERY_TIMEOUT_S = 120.0
ORPHAN_WAIT_S = 30.0
DRAIN_BURST = 192  # long texts admitted when SIGTERM arrives: a few seconds of work
# ~200 tokens each: a burst of them is still queued when SIGTERM arrives.
LONG_TEXT = " ".join(f"sentence {i} about transformers and attention." for i in range(28))
WORDS = [
    "the", "model", "server", "batches", "short", "texts", "and", "long", "documents", "while",
    "every", "request", "may", "pick", "its", "own", "attention", "backend", "for", "speed",
    "memory", "or", "exactness", "on", "host", "it", "runs", "today", "with", "clients",
]  # fmt: skip


def _bin(name: str) -> str:
    script = Path(sys.executable).parent / name
    return str(script) if script.is_file() else name


@dataclass(frozen=True)
class Manager:
    """One worker manager: its name in the tables and its command for a port."""

    name: str
    command: Callable[[int], list[str]]
    own_metrics_dir: bool  # makes PROMETHEUS_MULTIPROC_DIR itself


def _ours(port: int) -> list[str]:
    return [_bin("attnserve"), "serve", "--workers", str(WORKERS), "--host", HOST,
            "--port", str(port)]  # fmt: skip


def _gunicorn(port: int) -> list[str]:
    return [
        _bin("gunicorn"), "-c", f"python:{ADAPTER}",
        "-k", f"{ADAPTER}.GuardedUvicornWorker", "-w", str(WORKERS),
        "-b", f"{HOST}:{port}",
        "--graceful-timeout", f"{GRACE_S:g}",
        "--timeout", "120",  # a worker must notify within this, and it cannot while loading
        "--log-level", "warning",
        f"{ADAPTER}:create_app()",
    ]  # fmt: skip


def _uvicorn(port: int) -> list[str]:
    s = Settings()
    return [
        _bin("uvicorn"), "--factory", f"{ADAPTER}:create_app", "--workers", str(WORKERS),
        "--host", HOST, "--port", str(port),
        "--http", f"{ADAPTER}:GuardedProtocol",
        "--h11-max-incomplete-event-size", str(s.max_header_bytes),
        "--timeout-keep-alive", str(s.keep_alive_timeout_s),
        "--timeout-graceful-shutdown", f"{GRACE_S:g}",
        "--limit-concurrency", str(s.max_connections),
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


MANAGERS = {
    "ours": Manager("ours", _ours, True),
    "gunicorn": Manager("gunicorn", _gunicorn, False),
    "uvicorn": Manager("uvicorn", _uvicorn, False),
}
TITLES = {
    "ours": "ours (`attnserve serve --workers 2`)",
    "gunicorn": "gunicorn + UvicornWorker",
    "uvicorn": "`uvicorn --workers 2`",
}


# ----------------------------------------------------------------------------- processes


class Running:
    """One manager started on a free port, in its own session, logging to a file."""

    def __init__(self, manager: Manager, log: Path, models: str = MODEL) -> None:
        self.manager = manager
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.metrics_dir = None if manager.own_metrics_dir else tempfile.mkdtemp(prefix="wm-")
        env = {
            **server_env(1),
            "ATTNSERVE_MODELS": models,
            "ATTNSERVE_DEVICE": "cpu",
            "ATTNSERVE_TORCH_THREADS": "1",
            "ATTNSERVE_LOG_LEVEL": "warning",
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if self.metrics_dir:
            env["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            manager.command(self.port), cwd=ROOT, env=env, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.started = time.monotonic()
        self._seen: dict[int, psutil.Process] = {}

    def workers(self) -> list[int]:
        """The manager's worker processes (not multiprocessing's resource tracker)."""
        out = []
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return out
        for child in children:
            try:
                if "resource_tracker" not in " ".join(child.cmdline()):
                    out.append(child.pid)
            except psutil.Error:
                pass
        return sorted(out)

    def track(self) -> None:
        """Remember every process below the manager, to be sure none outlives the run."""
        try:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self._seen.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass

    def close(self) -> None:
        """Stop the manager (SIGTERM, then SIGKILL) and kill whatever of it is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(GRACE_S + 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in self._seen.values():
            try:
                if p.is_running():  # the same process (pid and start time), not a reused pid
                    p.kill()
            except psutil.Error:
                pass
        self._log.close()
        if self.metrics_dir:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)


def cpu_seconds(pid: int) -> Callable[[], float]:
    """A reader of ``pid``'s CPU seconds so far (user + system)."""
    proc = psutil.Process(pid)

    def read() -> float:
        times = proc.cpu_times()
        return times.user + times.system

    return read


def alive(p: psutil.Process) -> bool:
    """Whether ``p`` still runs (a zombie does not)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ----------------------------------------------------------------------------- probes


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def fresh(url: str, timeout: float = 10.0) -> httpx.AsyncClient:
    """A client that opens a new connection for every request (so any worker may answer)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits)


async def ask(client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> tuple[str, str]:
    """What a request got, in words (``HTTP 200``, ``refused``, ``no answer``, ...), and the
    answering process's request-id prefix ("" when none)."""
    try:
        r = await client.request(method, path, **kw)
    except httpx.ConnectError:
        return "connection refused", ""
    except httpx.TimeoutException:
        return "no answer", ""
    except httpx.HTTPError as exc:
        return f"connection dropped ({type(exc).__name__})", ""
    return f"HTTP {r.status_code}", r.headers.get("x-request-id", "").rsplit("-", 1)[0]


async def wait_serving(run: Running, timeout: float = 300.0) -> set[str]:
    """Post until ``WORKERS`` processes have answered; their request-id prefixes."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    async with fresh(run.url, timeout=5.0) as c:
        while len(seen) < WORKERS:
            if run.proc.poll() is not None:
                raise RuntimeError(f"{run.manager.name} exited; see {run.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{run.manager.name}: not serving; see {run.log_path}")
            outcome, prefix = await ask(c, "POST", "/encode", json={"inputs": "ready?"})
            if outcome == "HTTP 200":
                seen.add(prefix)
            else:
                await asyncio.sleep(0.2)
    return seen


# ----------------------------------------------------------------------------- scenarios


def short_requests(port: int, n: int = 512) -> list[bytes]:
    """``n`` ``/encode`` requests of one text of 8 to 24 words each."""
    rng = random.Random(0)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(8, 24))) for _ in range(n)]
    return [build_request(HOST, port, "/encode", json.dumps({"inputs": t}).encode()) for t in texts]


async def check_metrics(run: Running, n: int = 64, scrapes: int = 6) -> dict[str, Any]:
    """``n`` requests on fresh connections; how much each scrape's ``/encode`` counter grew."""
    async with fresh(run.url, timeout=60.0) as c:
        scrape = (await c.get("/metrics")).text
        before = metric(scrape, "attnserve_requests_total", endpoint="/encode")
        answers = await asyncio.gather(
            *(ask(c, "POST", "/encode", json={"inputs": f"count me {i}"}) for i in range(n))
        )
        counted = []
        for _ in range(scrapes):
            scrape = (await c.get("/metrics")).text
            counted.append(metric(scrape, "attnserve_requests_total", endpoint="/encode") - before)
    return {
        "sent": n,
        "answered": sum(a == "HTTP 200" for a, _ in answers),
        "answering_processes": len({p for a, p in answers if a == "HTTP 200"}),
        "counted_per_scrape": counted,
        "aggregates": all(c == n for c in counted),
    }


async def check_header_limit(run: Running) -> str:
    """What a request with 20 kB of headers gets (ours: 431)."""
    async with fresh(run.url) as c:
        outcome, _ = await ask(c, "GET", "/healthz", headers={"x-big": "a" * 20_000})
    return outcome


def connections(pid: int, port: int) -> int:
    """Established connections on ``port`` that process ``pid`` holds."""
    try:
        conns = psutil.Process(pid).net_connections("tcp")
    except psutil.Error:
        return 0
    return sum(c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED for c in conns)


def batch_totals(run: Running) -> tuple[float, float]:
    """Requests run in batches so far, and batches (all workers)."""
    scrape = httpx.get(run.url + "/metrics", timeout=10).text
    return (
        metric(scrape, "attnserve_batch_size_requests_sum"),
        metric(scrape, "attnserve_batch_size_requests_count"),
    )


def speed(run: Running, requests: list[bytes], args: argparse.Namespace) -> dict[str, Any]:
    """One speed window (module docstring, 1), with what explains it: how the clients'
    connections are split among the workers (mid-window), the mean batch (requests per batch,
    warm-up included) and each worker's CPU seconds."""
    pids = run.workers()
    split: list[int] = []
    sampler = threading.Timer(
        args.warmup + args.seconds / 2,
        lambda: split.extend(sorted((connections(p, run.port) for p in pids), reverse=True)),
    )
    probes = {f"worker {pid}": cpu_seconds(pid) for pid in pids}
    load = os.getloadavg()[0]
    rows_before, batches_before = batch_totals(run)
    sampler.start()
    s = run_load(HOST, run.port, requests, args.clients, args.seconds, args.warmup, probes)
    sampler.join()
    rows_after, batches_after = batch_totals(run)
    rows, batches = rows_after - rows_before, batches_after - batches_before
    return {
        "throughput": s.throughput,
        "p50_ms": s.pct(50),
        "p99_ms": s.pct(99),
        "errors": s.error_count,
        "load_avg": load,
        "connections": split,
        "mean_batch": rows / max(1.0, batches),
        "worker_cpu_s": [s.cpu_s[k] for k in probes],
    }


def rate(results: list[LoadResult]) -> float:
    """Answers per second over several load windows."""
    return sum(r.requests for r in results) / max(1e-9, sum(r.seconds for r in results))


async def kill_one_worker(
    run: Running, before: set[str], requests: list[bytes], clients: int
) -> dict[str, Any]:
    """SIGKILL one worker under load; see the module docstring (3)."""
    stop = asyncio.Event()
    chunks: list[tuple[float, LoadResult]] = []

    async def load() -> None:
        while not stop.is_set():
            started = time.monotonic()
            result = await drive(HOST, run.port, requests, clients, CHUNK_S, warmup=0.0)
            chunks.append((started, result))

    task = asyncio.create_task(load())
    await asyncio.sleep(3 * CHUNK_S + 0.5)
    run.track()
    victim = run.workers()[0]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    recovered: float | None = None
    async with fresh(run.url, timeout=5.0) as c:
        while time.monotonic() - killed < RECOVERY_TIMEOUT_S:
            outcome, prefix = await ask(c, "POST", "/encode", json={"inputs": "probe"})
            if outcome == "HTTP 200" and prefix not in before:
                recovered = time.monotonic() - killed
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(3 * CHUNK_S + 0.5)  # two whole chunks after the recovery
        stop.set()
        await task
        run.track()
        in_flight = [
            metric((await c.get("/metrics")).text, "attnserve_requests_in_flight") for _ in range(4)
        ]
    pre = [r for t, r in chunks[1:] if t + CHUNK_S <= killed]  # the first: connections open
    post = [r for t, r in chunks if recovered is not None and t >= killed + recovered]
    errors: Counter[str] = Counter()
    for t, r in chunks:
        if t + CHUNK_S >= killed:
            errors.update(r.errors)
    return {
        "recovered_s": recovered,
        "failed_requests": sum(errors.values()),
        "failures": dict(errors),
        "throughput_before": rate(pre),
        "throughput_after": rate(post) if post else None,
        "idle_in_flight_after": max(in_flight),
    }


def runs(outcomes: list[str]) -> str:
    """``["a", "a", "b"]`` as ``"a x2, then b x1"``."""
    out: list[list[Any]] = []
    for o in outcomes:
        if out and out[-1][0] == o:
            out[-1][1] += 1
        else:
            out.append([o, 1])
    return ", then ".join(f"{o} x{k}" for o, k in out) or "-"


async def sigterm_drain(run: Running, n: int = DRAIN_BURST) -> dict[str, Any]:
    """SIGTERM to the manager with ``n`` long texts admitted; see the module docstring (4)."""
    pids = [psutil.Process(p) for p in run.workers()]
    run.track()
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with (
        httpx.AsyncClient(base_url=run.url, timeout=120, limits=limits) as burst,
        fresh(run.url, timeout=3.0) as c,
    ):
        scrape = (await c.get("/metrics")).text
        answered_before = metric(scrape, "attnserve_requests_total", endpoint="/encode")
        stale = metric(scrape, "attnserve_requests_in_flight")  # a dead worker's, if kept
        tasks = [
            asyncio.create_task(burst.post("/encode", json={"inputs": [f"{i} {LONG_TEXT}"]}))
            for i in range(n)
        ]
        deadline = time.monotonic() + 30
        while True:
            scrape = (await c.get("/metrics")).text
            in_flight = metric(scrape, "attnserve_requests_in_flight") - stale
            answered = metric(scrape, "attnserve_requests_total", endpoint="/encode")
            if in_flight + answered - answered_before >= n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.005)
        signalled = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        exit_code = asyncio.create_task(asyncio.to_thread(run.proc.wait, GRACE_S + 30))
        # New requests and readiness probes on fresh connections until the manager exits.
        late: list[asyncio.Task[tuple[str, str]]] = []
        ready: list[asyncio.Task[tuple[str, str]]] = []
        while not exit_code.done():
            body = {"inputs": "arrived after SIGTERM"}
            late.append(asyncio.create_task(ask(c, "POST", "/encode", json=body)))
            ready.append(asyncio.create_task(ask(c, "GET", "/readyz")))
            await asyncio.wait([exit_code], timeout=0.25)
        exited = time.monotonic() - signalled
        results = await asyncio.gather(*tasks, return_exceptions=True)
        late_outcomes = [o for o, _ in await asyncio.gather(*late)]
        ready_outcomes = [o for o, _ in await asyncio.gather(*ready)]
    outcomes = Counter(
        f"HTTP {r.status_code}" if isinstance(r, httpx.Response) else type(r).__name__
        for r in results
    )
    try:
        code: int | None = exit_code.result()
    except subprocess.TimeoutExpired:
        code = None
    return {
        "in_flight_at_signal": in_flight,
        "burst": n,
        "answered": outcomes.get("HTTP 200", 0),
        "outcomes": dict(outcomes),
        "new_requests": runs(late_outcomes),
        "readyz": runs(ready_outcomes),
        "exit_status": code,
        "exit_s": exited,
        "workers_left": sum(alive(p) for p in pids),
    }


def manager_killed(run: Running) -> dict[str, Any]:
    """SIGKILL the manager: do its workers exit on their own?"""
    run.track()
    pids = [psutil.Process(p) for p in run.workers()]
    killed = time.monotonic()
    run.proc.kill()
    run.proc.wait()
    while time.monotonic() - killed < ORPHAN_WAIT_S:
        if not any(alive(p) for p in pids):
            return {"workers_exited_s": time.monotonic() - killed, "port_answers": None}
        time.sleep(0.1)

    async def probe() -> str:
        async with fresh(run.url, timeout=5.0) as c:
            return (await ask(c, "POST", "/encode", json={"inputs": "anyone?"}))[0]

    left = sum(alive(p) for p in pids)
    return {"workers_exited_s": None, "workers_left": left, "port_answers": asyncio.run(probe())}


def startup_failure(manager: Manager, log: Path) -> dict[str, Any]:
    """Start with an unknown model: exit status and seconds (None: still running at 120 s)."""
    run = Running(manager, log, models="informer-etth1-h999")
    try:
        code: int | None = run.proc.wait(120)
    except subprocess.TimeoutExpired:
        code = None
    took = time.monotonic() - run.started
    run.track()
    run.close()
    return {"exit_status": code, "exit_s": took if code is not None else None}


# ----------------------------------------------------------------------------- report


def fmt_s(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f} s"


def behaviour_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """(behaviour, what one manager did) in the order of the table."""
    m, d, kills = r["metrics"], r["drain"], r["kills"]
    rec = [k["recovered_s"] for k in kills]
    after = [k["throughput_after"] / k["throughput_before"] for k in kills if k["throughput_after"]]
    orphan = r["orphans"]
    fail = r["startup_failure"]
    exit_ok = d["exit_status"] == 0 and d["exit_s"] <= GRACE_S
    return [
        (
            "start: both workers serving after",
            " / ".join(fmt_s(s["ready_s"]) for s in r["speed"]),
        ),
        ("header guard (20 kB of headers)", r["header_limit"]),
        (
            "`/metrics` from any worker counts all",
            f"{'yes' if m['aggregates'] else 'no'}: {sorted(set(m['counted_per_scrape']))} "
            f"of {m['sent']} on {len(m['counted_per_scrape'])} scrapes",
        ),
        (
            "SIGKILLed worker: a replacement serves after",
            " / ".join(fmt_s(x) for x in rec)
            + (f" (median {statistics.median(rec):.1f} s)" if None not in rec else ""),
        ),
        (
            "SIGKILLed worker: failed requests (32 clients)",
            " / ".join(str(k["failed_requests"]) for k in kills),
        ),
        (
            "SIGKILLed worker: throughput after recovery vs before",
            " / ".join(f"{x:.0%}" for x in after) or "-",
        ),
        (
            "SIGKILLed worker: idle `requests_in_flight` after",
            " / ".join(f"{k['idle_in_flight_after']:g}" for k in kills)
            + (" (stale)" if any(k["idle_in_flight_after"] for k in kills) else ""),
        ),
        (
            "SIGTERM: admitted requests answered",
            f"{d['answered']} of {d['burst']} ({d['in_flight_at_signal']:g} in flight)",
        ),
        ("SIGTERM: new requests until exit (every 0.25 s)", d["new_requests"]),
        ("SIGTERM: `/readyz` until exit", d["readyz"]),
        (
            "SIGTERM: exit status, time",
            f"{d['exit_status']} after {d['exit_s']:.1f} s"
            + ("" if exit_ok else " (not within the grace)")
            + (f", {d['workers_left']} workers left" if d["workers_left"] else ""),
        ),
        (
            "start-up failure: exit status, time",
            "still running at 120 s"
            if fail["exit_status"] is None
            else f"{fail['exit_status']} after {fail['exit_s']:.1f} s",
        ),
        (
            "manager SIGKILLed: its workers",
            f"exit after {orphan['workers_exited_s']:.1f} s"
            if orphan["workers_exited_s"] is not None
            else f"{orphan['workers_left']} still running after {ORPHAN_WAIT_S:g} s; "
            f"the port answers: {orphan['port_answers']}",
        ),
    ]


def report(args: argparse.Namespace, results: dict[str, Any], host: dict[str, str]) -> str:
    names = list(results)
    base = "ours" if "ours" in results else names[0]
    base_rate = statistics.median(r["throughput"] for r in results[base]["speed"])
    lines = [
        "# Worker managers: our supervisor, gunicorn with uvicorn workers, uvicorn --workers (CPU)",
        "",
        f"`.venv/bin/python -m benchmarks.worker_managers --rounds {args.rounds} "
        f"--seconds {args.seconds:g} --clients {args.clients}`",
        "",
        f"Host: {host['cpu']}, {host['cores']} cores; load average {host['load_start']} at the "
        f"start, {host['load_end']} at the end. {host['versions']}.",
        "",
        f"Two workers each, all-MiniLM-L6-v2 on CPU, one torch thread per worker, the same "
        f"uvicorn settings and header guard, prometheus-client multiprocess mode. Speed: "
        f"{args.clients} closed-loop keep-alive clients, one short text (8-24 words) per "
        f"`/encode`, {args.warmup:g} s warm-up then {args.seconds:g} s; median of "
        f"{args.rounds} rounds (the managers alternate within each round). Connections per "
        "worker: how the clients' keep-alive connections were split, mid-window; a worker with "
        "fewer runs smaller batches (mean batch: requests per batch), which cost more per "
        "request on CPU.",
        "",
        f"| manager | req/s | vs {base} | p50 ms | p99 ms | errors | req/s per round | "
        "connections per worker | mean batch | load avg at round start |",
        "|---|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for name in names:
        speed = results[name]["speed"]
        median = statistics.median(s["throughput"] for s in speed)
        lines.append(
            f"| {TITLES[name]} | {median:.0f} | {median / base_rate - 1:+.0%} | "
            f"{statistics.median(s['p50_ms'] for s in speed):.1f} | "
            f"{statistics.median(s['p99_ms'] for s in speed):.1f} | "
            f"{sum(s['errors'] for s in speed)} | "
            + " / ".join(f"{s['throughput']:.0f}" for s in speed)
            + " | "
            + " / ".join(":".join(map(str, s["connections"])) for s in speed)
            + " | "
            + " / ".join(f"{s['mean_batch']:.1f}" for s in speed)
            + " | "
            + " / ".join(f"{s['load_avg']:.2f}" for s in speed)
            + " |"
        )
    rows = {name: behaviour_rows(results[name]) for name in names}
    lines += [
        "",
        "Behaviours (`tests/service/test_workers.py` checks each of ours); values per round "
        "joined by /:",
        "",
        "| behaviour | " + " | ".join(TITLES[n] for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for i, (label, _) in enumerate(rows[names[0]]):
        lines.append(f"| {label} | " + " | ".join(rows[n][i][1] for n in names) + " |")
    lines += [
        "",
        "Commands (the port is chosen at run time), each with `ATTNSERVE_MODELS=all-MiniLM-L6-v2 "
        "ATTNSERVE_DEVICE=cpu ATTNSERVE_TORCH_THREADS=1 OMP_NUM_THREADS=1` in its environment, "
        "and for gunicorn and uvicorn a fresh `PROMETHEUS_MULTIPROC_DIR`:",
        "",
    ]
    for n in names:
        command = MANAGERS[n].command(8000)
        lines.append(f"- {TITLES[n]}: `{' '.join([Path(command[0]).name, *command[1:]])}`")
    return "\n".join(lines) + "\n"


def versions() -> str:
    out = []
    for package in ("gunicorn", "uvicorn", "prometheus-client", "torch"):
        try:
            out.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{package} -")
    return ", ".join(out)


# ----------------------------------------------------------------------------- main


def measure(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    names = list(args.managers)
    results: dict[str, Any] = {n: {"speed": [], "kills": []} for n in names}
    for rnd in range(args.rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            manager = MANAGERS[name]
            r = results[name]
            run = Running(manager, logs / f"{name}-{rnd}.log")
            try:
                before = asyncio.run(wait_serving(run))
                ready_s = time.monotonic() - run.started
                run.track()
                requests = short_requests(run.port)
                r["speed"].append(speed(run, requests, args) | {"ready_s": ready_s})
                sp = r["speed"][-1]
                print(f"round {rnd + 1} {name}: {sp['throughput']:.0f} req/s, p50 "
                      f"{sp['p50_ms']:.1f} ms, p99 {sp['p99_ms']:.1f} ms, connections "
                      f"{sp['connections']}, batch {sp['mean_batch']:.1f}, load "
                      f"{sp['load_avg']:.2f}", flush=True)  # fmt: skip
                if rnd == 0:
                    r["metrics"] = asyncio.run(check_metrics(run))
                    r["header_limit"] = asyncio.run(check_header_limit(run))
                kill = asyncio.run(kill_one_worker(run, before, requests, args.clients))
                r["kills"].append(kill)
                print(f"  kill: {kill}", flush=True)
                if rnd == 0:
                    r["drain"] = asyncio.run(sigterm_drain(run))
                    print(f"  drain: {r['drain']}", flush=True)
                else:
                    r["orphans"] = manager_killed(run)
                    print(f"  orphans: {r['orphans']}", flush=True)
            finally:
                run.close()
    for name in names:
        results[name]["startup_failure"] = startup_failure(MANAGERS[name], logs / f"{name}-f.log")
        print(f"{name} start-up failure: {results[name]['startup_failure']}", flush=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="at least 2 (orphans: round 2)")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--managers", nargs="+", default=list(MANAGERS), choices=list(MANAGERS))
    p.add_argument("--keep-logs", type=Path, help="a folder for the servers' logs")
    args = p.parse_args()
    if args.rounds < 2:
        p.error("--rounds must be at least 2")
    host = {"cpu": cpu_model(), "cores": str(os.cpu_count()), "load_start": load_average(),
            "versions": versions()}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.keep_logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        results = measure(args, logs)
    host["load_end"] = load_average()
    text = report(args, results, host)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "worker-managers-cpu.md").write_text(text)
    (RESULTS / "worker-managers-cpu.json").write_text(
        json.dumps({"host": host, "args": vars(args), "results": results}, indent=1, default=str)
    )


if __name__ == "__main__":
    main()
