"""What the service benchmarks that drive a server with closed-loop clients share: their load
options, their smoke values, the alternating round order and the per-round cells of a table."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.load import HOST, LoadResult, run_load, say
from benchmarks.harness.process import ServerProcess
from benchmarks.service.workloads import Workload

K = TypeVar("K")
T = TypeVar("T")

# What ``--smoke`` runs every load with: a second measured, half a second of warm-up, 4 clients.
SMOKE = {"seconds": 1.0, "warmup": 0.5, "clients": 4}


def load_options(seconds: float, clients: int = 32, warmup: float = 2.0) -> argparse.ArgumentParser:
    """``--seconds`` (measured per run), ``--clients``, ``--warmup`` and ``--log-dir``."""
    parent = argparse.ArgumentParser(
        add_help=False, parents=[cli.seconds(seconds, "measured seconds per run")]
    )
    parent.add_argument("--clients", type=int, default=clients, help="closed-loop clients")
    parent.add_argument("--warmup", type=float, default=warmup, help="unmeasured seconds first")
    parent.add_argument("--log-dir", type=Path, default=Path("/tmp"), help="the servers' logs")
    return parent


def alternated(items: Sequence[T], round_index: int) -> Sequence[T]:
    """``items`` in order on even rounds, reversed on odd ones, so drift hits all alike."""
    return items if round_index % 2 == 0 else items[::-1]


def load_before() -> str:
    """The load average now, also printed: other work on the machine skews what follows."""
    load = load_average()
    print(f"load average before: {load} ({os.cpu_count()} CPUs)", flush=True)
    return load


def pooled(results: Sequence[LoadResult]) -> list[float]:
    """The latencies (ms) of several rounds' runs, pooled."""
    return [x for r in results for x in r.latencies_ms]


def per_round(values: Sequence[float], fmt: str = ".1f", sep: str = ", ") -> str:
    """Each round's value, in round order."""
    return sep.join(f"{v:{fmt}}" for v in values)


def commit(root: Path) -> str:
    """The short commit hash ``root`` has checked out (plus "+ edits" when its tree differs)."""
    git = ["git", "-C", str(root)]
    sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD"], capture_output=True).returncode
    return sha.stdout.strip() + (" + uncommitted edits" if dirty else "")


def drive_each(
    server: ServerProcess,
    workloads: Mapping[K, Workload],
    clients: int,
    seconds: float,
    warmup: float,
    label: str,
    ready_timeout: float = 300.0,
) -> dict[K, LoadResult]:
    """Once ``server`` is ready, drive each workload in turn with ``clients`` closed-loop
    clients (its CPU probed), printing a line each; then stop it."""
    results = {}
    try:
        server.wait_ready(timeout=ready_timeout)
        probes = {"server": server.cpu_seconds}
        for key, work in workloads.items():
            wire = work.requests(server.port)
            result = run_load(HOST, server.port, wire, clients, seconds, warmup, probes)
            results[key] = result
            say(
                f"{label} {work.label}:",
                result,
                f"  batch {statistics.fmean(result.batch_sizes or [0]):4.1f}  cpu server "
                f"{result.cpu_ms_per_request():5.2f} / client "
                f"{result.cpu_ms_per_request('driver'):5.2f} ms/req",
            )
    finally:
        server.stop()
    return results
