"""Our supervisor against the standard worker managers: ``attnserve serve --workers 2``, gunicorn
with uvicorn workers and uvicorn's own ``--workers``, on speed and on the behaviours
``tests/service/test_workers.py`` asks of ours.

    .venv/bin/python -m benchmarks.service.worker_managers [--rounds 2] [--seconds 10] [--clients 32]

Every manager runs two workers of all-MiniLM-L6-v2 (CPU, one torch thread each) with the same
uvicorn settings, header guard (the standard ones through :mod:`.worker_managers_app`) and
prometheus-client multiprocess mode. In each of ``--rounds`` rounds every manager in turn (the
order reversed every other round) is started and, once both workers answer, measured:

1. **speed** (:func:`speed`) under ``--clients`` closed-loop keep-alive clients;
2. first round: **metrics** aggregation (:func:`check_metrics`) and the **header limit**;
3. **SIGKILL of one worker** under load (:func:`kill_one_worker`);
4. first round: **SIGTERM** with a burst admitted (:func:`sigterm_drain`); later rounds:
   **SIGKILL of the manager** (:func:`manager_killed`): do its workers exit?

Then once per manager a **start-up failure** (an unknown model). Writes
``benchmarks/results/worker-managers-cpu.{md,json}`` (:mod:`.worker_managers_report`).
``--smoke``: attnserve's supervisor alone, two short rounds, 16 texts admitted at SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from itertools import groupby
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.load import HOST, LoadResult, build_request, drive, run_load
from benchmarks.harness.process import cpu_seconds
from benchmarks.harness.report import RESULTS, write
from benchmarks.service import common
from benchmarks.service.common import alternated
from benchmarks.service.managers import (
    GRACE_S,
    MANAGERS,
    Manager,
    Running,
    alive,
    ask,
    fresh,
    metric,
    wait_serving,
)
from benchmarks.service.worker_managers_report import ORPHAN_WAIT_S, report, versions

CHUNK_S = 2.0  # the kill scenario's load reconnects this often
RECOVERY_TIMEOUT_S = 120.0
DRAIN_BURST = 192  # long texts admitted when SIGTERM arrives: a few seconds of work
# ~200 tokens each: a burst of them is still queued when SIGTERM arrives.
LONG_TEXT = " ".join(f"sentence {i} about transformers and attention." for i in range(28))
WORDS = [
    "the", "model", "server", "batches", "short", "texts", "and", "long", "documents", "while",
    "every", "request", "may", "pick", "its", "own", "attention", "backend", "for", "speed",
    "memory", "or", "exactness", "on", "host", "it", "runs", "today", "with", "clients",
]  # fmt: skip


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
    probes = {f"worker {pid}": partial(cpu_seconds, pid, False) for pid in pids}
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
    return ", then ".join(f"{o} x{len(list(same))}" for o, same in groupby(outcomes)) or "-"


async def sigterm_drain(run: Running, n: int = DRAIN_BURST) -> dict[str, Any]:
    """SIGTERM to the manager with ``n`` long texts admitted; see the module docstring (4)."""
    pids = [psutil.Process(p) for p in run.workers()]
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
    run.close()
    return {"exit_status": code, "exit_s": took if code is not None else None}


# ----------------------------------------------------------------------------- main


def measure(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    names = list(args.managers)
    results: dict[str, Any] = {n: {"speed": [], "kills": []} for n in names}
    for rnd in range(args.rounds):
        for name in alternated(names, rnd):
            manager = MANAGERS[name]
            r = results[name]
            run = Running(manager, logs / f"{name}-{rnd}.log")
            try:
                before = asyncio.run(wait_serving(run))
                ready_s = time.monotonic() - run.started
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
                    r["drain"] = asyncio.run(sigterm_drain(run, args.burst))
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


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.seconds(10.0), cli.rounds(2, "at least 2 (orphans: round 2)"))
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--managers", nargs="+", default=list(MANAGERS), choices=list(MANAGERS))
    p.add_argument("--keep-logs", type=Path, help="a folder for the servers' logs")
    p.set_defaults(burst=DRAIN_BURST)
    args = cli.parse(p, argv, **common.SMOKE, managers=["ours"], burst=16)
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
    write(RESULTS / "worker-managers-cpu.md", text)
    record = {"host": host, "args": vars(args), "results": results}
    write(RESULTS / "worker-managers-cpu.json", json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
