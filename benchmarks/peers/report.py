"""The peer benchmark's results: what a run records of the machine and each server
(:func:`run_meta`), per-server summaries, the cells both tasks' pages share, and what a task
hands the runner (:class:`Task`, :class:`Workload`).

Throughput is the median over rounds of each round's req/s; latency percentiles pool every
round's answers (nearest rank); CPU per request sums CPU seconds and requests over rounds.
Ratios compare with LitServe at the same client count.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness.host import cores, cpu_model, load_average
from benchmarks.harness.load import LoadResult
from benchmarks.harness.timing import percentile
from benchmarks.peers.servers import Peer, PeerServer, Turn

BASELINE = "litserve"


@dataclass(frozen=True)
class Summary:
    """One server at one client count, over all rounds."""

    server: str
    clients: int
    rps_rounds: list[float]
    p50_ms: float
    p95_ms: float
    p99_ms: float
    requests: int
    errors: dict[str, int]
    server_cpu_ms_per_request: float
    driver_cpu_ms_per_request: float
    other_cores: float  # mean cores busy with neither the server nor the driver in the window

    @property
    def rps(self) -> float:
        return statistics.median(self.rps_rounds) if self.rps_rounds else float("nan")

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


Loads = dict[tuple[str, int], list[tuple[str, str]]]  # 1-minute load before/after, per round
Rounds = dict[tuple[str, int], list[LoadResult]]


@dataclass(frozen=True)
class Workload:
    """What a task prepares before the rounds."""

    folder: Path  # the model folder every server loads
    items: list[Any]  # what the clients cycle through; the first also warms each server
    inprocess: list[dict[str, Any]]  # the in-process rows
    check: Callable[[PeerServer, Any], float]  # a server's first answer -> its figure, or exit
    meta: dict[str, Any]  # the task's fields for :func:`run_meta`


@dataclass(frozen=True)
class Task:
    """One peer comparison (``run.py --task``): its servers, options, workload and page."""

    peers: dict[str, Peer]  # ``--servers`` picks among them, in this order by default
    tag: str  # in the server logs' names: ``<server>-<tag>-r<round>.log``
    defaults: dict[str, Any]  # ``--clients``, ``--seconds``, ``--warmup``, ``--name``, ...
    smoke: dict[str, Any]  # the task's own ``--smoke`` values
    options: Callable[[argparse.ArgumentParser], None]  # adds the task's own options
    prepare: Callable[[argparse.Namespace], Workload]
    quality: str  # the ``server_info`` key of the check's figures
    page: Callable[[dict[str, Any], list[Summary], list[dict[str, Any]], Loads], str]
    record: Callable[
        [dict[str, Any], list[Summary], list[dict[str, Any]], Rounds, Loads], dict[str, Any]
    ]


def _per_request(rounds: list[LoadResult], key: str) -> float:
    requests = sum(r.requests for r in rounds)
    if not requests or any(key not in r.cpu_s for r in rounds):
        return float("nan")
    return sum(r.cpu_s[key] for r in rounds) * 1000.0 / requests


def other_cores(result: LoadResult) -> float:
    """Cores busy on average with other processes than the server and the driver during the
    window (the machine's busy CPU seconds less theirs): load from elsewhere that skews it."""
    cpu = result.cpu_s
    if not {"machine", "server", "driver"} <= cpu.keys() or result.seconds <= 0:
        return float("nan")
    return max(0.0, cpu["machine"] - cpu["server"] - cpu["driver"]) / result.seconds


def summarize(server: str, clients: int, rounds: list[LoadResult]) -> Summary:
    latencies = [x for r in rounds for x in r.latencies_ms]
    requests = sum(r.requests for r in rounds)
    errors: Counter[str] = Counter()
    for r in rounds:
        errors.update(r.errors)
    return Summary(
        server=server,
        clients=clients,
        rps_rounds=[r.throughput for r in rounds],
        p50_ms=percentile(latencies, 50),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        requests=requests,
        errors=dict(errors),
        server_cpu_ms_per_request=_per_request(rounds, "server"),
        driver_cpu_ms_per_request=_per_request(rounds, "driver"),
        other_cores=statistics.fmean(other_cores(r) for r in rounds) if rounds else math.nan,
    )


def summaries(rounds: Rounds, servers: list[str], clients: list[int]) -> list[Summary]:
    """One summary per run, every server at the first client count, then at the next, ..."""
    return [summarize(name, c, rounds[(name, c)]) for c in clients for name in servers]


def ratio_of(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else float("nan")


def x_cell(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def baseline_of(summaries: list[Summary], clients: int) -> Summary | None:
    return next((s for s in summaries if s.server == BASELINE and s.clients == clients), None)


def loads_cell(pairs: list[tuple[str, str]]) -> str:
    """The 1-minute load average before -> after each round's run."""
    return " / ".join(f"{a.split()[0]}→{b.split()[0]}" for a, b in pairs)


def stop_cell(stop: dict[str, Any], sep: str = "; ") -> str:
    """How one server's process tree ended: the last signal, how long, what outlived SIGTERM."""
    outlived = (
        f" (outlived SIGTERM: {sep.join(stop['outlived_term'])})" if stop["outlived_term"] else ""
    )
    return f"{stop['signal']} {stop['seconds']:.1f} s{outlived}"


def vs_baseline(s: Summary, summaries: list[Summary]) -> str:
    """``s``'s req/s over LitServe's at the same client count ("-" without LitServe)."""
    base = baseline_of(summaries, s.clients)
    return x_cell(ratio_of(s.rps, base.rps)) if base else "-"


def run_meta(
    args: argparse.Namespace, command: str, load_before: str, peers: Mapping[str, Peer],
    pythons: Mapping[str, Path], turns: Mapping[str, list[Turn]], **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """What every peer run records: the command, the machine, the load, the run's shape
    (``extra`` added), and per server its configuration, interpreter, versions, start-up times
    and how its process tree ended each round."""
    return {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": cores(),
        "threads": args.threads,
        "omp_wait_policy": args.omp_wait_policy,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "clients": args.clients,
        "servers": args.servers,
        "load_before": load_before,
        "load_after": load_average(),
        **extra,
        "server_info": {
            name: {
                "config": peers[name].config,
                "torch_threads": args.threads,
                "venv": pythons[peers[name].interpreter].parent.parent.name,
                "versions": versions(pythons[peers[name].interpreter], peers[name].packages),
                "startup_s": [t.startup_s for t in turns[name]],
                "stops": [asdict(t.stopped) for t in turns[name] if t.stopped],
            }
            for name in args.servers
        },
    }


def versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``packages`` in ``python``'s environment ("-" if missing)."""
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = '-'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script, *packages], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))
