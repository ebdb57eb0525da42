"""torch's CPU threads beside other work: thread count and OpenMP wait policy, quiet, beside a
spinning neighbour, and inside a one-CPU cgroup quota (issue 37, item 2).

    python -m benchmarks.text.threads                 # 3 rounds, writes benchmarks/results/threads-cpu.md
    python -m benchmarks.text.threads --rounds 1 --seconds 2 --no-quota

In-process, no HTTP: all-MiniLM-L6-v2 (flash, float32) encodes 20-word texts of the
stdlib-docstring corpus at batch 32 (texts/s) and one at a time (texts/s, median ms per text).
Every configuration runs in a fresh process: the OpenMP runtime reads ``OMP_WAIT_POLICY`` /
``GOMP_SPINCOUNT`` once, when torch loads.

- threads ``auto``: what the server picks for ``torch_threads`` 0
  (:func:`service.engine.batching.cpus.torch_threads_default`: torch's count capped by the CPU quota);
  ``torch``: torch's own default (the server's before; it ignores the quota); ``1``.
- wait policy: ``unset`` (libgomp's default: spin 300,000 times, then sleep), ``ACTIVE``,
  ``PASSIVE``, and ``GOMP_SPINCOUNT=10000`` (a short spin, then sleep).
- place: ``quiet``; ``neighbour``: beside one spinning Python process (not pinned), started before
  the measuring process and killed (and checked gone) after it; ``quota 1 CPU``: inside a cgroup
  v1 ``cpu`` group with ``cfs_quota_us = cfs_period_us`` (``docker run --cpus 1``), made for the
  run and removed after it (needs root and a writable v1 cpu controller; skipped otherwise, or
  with ``--no-quota``). ``benchmarks/service/threads_http.py`` makes its own quota group (v2 or
  v1) for servers: the two differ in what they wrap, so each keeps its helper.

Configurations alternate within each round (the start rotates per round); the table gives the
median over rounds and the range. ``--smoke``: the first two configurations, one round of 0.2 s,
no quota.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import astuple, dataclass
from pathlib import Path

from benchmarks.harness import cli
from benchmarks.harness.process import neighbour
from benchmarks.harness.report import RESULTS, Report

QUOTA_GROUP = Path("/sys/fs/cgroup/cpu/attnserve-bench-threads")
QUOTA = "quota 1 CPU"  # the place label of the rows run inside QUOTA_GROUP
POLICIES: dict[str, dict[str, str]] = {
    "unset": {},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
}
OMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")  # cleared for each child


@dataclass(frozen=True)
class Config:
    """One measured configuration (the table's first three cells): where, how many threads,
    which wait policy."""

    place: str  # quiet | neighbour | QUOTA
    threads: str  # auto | torch | 1
    policy: str  # a key of POLICIES


def configs(quota: bool) -> list[Config]:
    """Every configuration, in the order a round runs them (quota rows only with ``quota``)."""
    out: list[Config] = []
    for place in ("quiet", "neighbour"):
        out += [Config(place, "auto", p) for p in POLICIES]
        out.append(Config(place, "1", "unset"))
    if quota:
        out += [Config(QUOTA, "torch", p) for p in ("unset", "PASSIVE")]
        out += [Config(QUOTA, "auto", p) for p in ("unset", "PASSIVE")]
        out.append(Config(QUOTA, "1", "unset"))
    return out


def measure(threads: str, seconds: float) -> dict[str, float]:
    """Runs in the child: set the thread count, load the encoder, time both batch sizes."""
    import torch

    from models.text import SentenceEncoder
    from models.text.quality.corpus import word_windows
    from service.engine.batching.cpus import torch_threads_default

    if threads == "auto":
        torch.set_num_threads(torch_threads_default(torch.get_num_threads()))
    elif threads != "torch":
        torch.set_num_threads(int(threads))
    encoder = SentenceEncoder.load()
    texts = word_windows(512, 20)
    batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]
    for _ in range(3):  # warm-up: first calls pick and cache kernels
        encoder.encode(batches[0])
        encoder.encode(texts[:1])
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        encoder.encode(batches[done % len(batches)])
        done += 1
    b32 = done * 32 / (time.perf_counter() - started)
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        t = time.perf_counter()
        encoder.encode([texts[len(latencies) % len(texts)]])
        latencies.append(time.perf_counter() - t)
    b1 = len(latencies) / (time.perf_counter() - started)
    return {
        "threads": torch.get_num_threads(),
        "b32": b32,
        "b1": b1,
        "b1_p50_ms": statistics.median(latencies) * 1e3,
    }


def make_quota_group() -> bool:
    """Make the one-CPU cgroup; False (and why, on stderr) where this host does not allow it."""
    try:
        QUOTA_GROUP.mkdir(exist_ok=True)
        period = (QUOTA_GROUP / "cpu.cfs_period_us").read_text().strip()
        (QUOTA_GROUP / "cpu.cfs_quota_us").write_text(period)  # one CPU
    except OSError as exc:
        print(f"no quota rows: {exc}", file=sys.stderr)
        return False
    return True


def remove_quota_group() -> None:
    """Remove the cgroup made by :func:`make_quota_group`."""
    if QUOTA_GROUP.exists():
        QUOTA_GROUP.rmdir()  # fails while a process is still inside: that would be a leak


def run_one(config: Config, seconds: float) -> dict[str, float]:
    """One configuration measured in a fresh process (beside the neighbour, in the quota)."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES}
    env.update(POLICIES[config.policy])
    cmd = [sys.executable, "-m", "benchmarks.text.threads", "--child", config.threads, "--seconds"]
    cmd.append(str(seconds))
    if config.place == QUOTA:
        # Join the group before the interpreter starts, so torch never runs outside it.
        joined = " ".join(cmd)
        cmd = ["sh", "-c", f"echo $$ > {QUOTA_GROUP}/cgroup.procs && exec {joined}"]
    with neighbour(config.place == "neighbour"):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _fmt(values: list[float], digits: int = 0) -> str:
    """The median over rounds and (more than one round) the range."""
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.rounds(3),
        cli.seconds(3.0, "per batch size and process"),
        cli.out(RESULTS / "threads-cpu.md"),
    )
    parser.add_argument("--no-quota", action="store_true", help="skip the cgroup quota rows")
    parser.add_argument("--child", metavar="THREADS", help=argparse.SUPPRESS)
    args = cli.parse(parser, argv, rounds=1, seconds=0.2, no_quota=True)
    if args.child:
        print(json.dumps(measure(args.child, args.seconds)), flush=True)
        return
    report = Report("benchmarks.text.threads", argv)
    quota = not args.no_quota and make_quota_group()
    order = configs(quota)[: 2 if args.smoke else None]
    runs: dict[Config, list[dict[str, float]]] = {c: [] for c in order}
    try:
        for round_ in range(args.rounds):
            shift = round_ * len(order) // max(1, args.rounds)
            for config in order[shift:] + order[:shift]:
                runs[config].append(run_one(config, args.seconds))
                print(f"round {round_ + 1} {astuple(config)}: {runs[config][-1]}", flush=True)
    finally:
        if quota:
            remove_quota_group()
    report.add(
        f"{args.rounds} round(s), {args.seconds:g} s per batch size per process; median over "
        "rounds (range). See the script's docstring for what each column means. The machine is "
        "shared with other people's work, which this run cannot control: compare rows of one "
        "run, not absolute figures across runs."
    )
    report.table(
        ["place", "threads", "wait policy", "threads used", "batch 32 texts/s", "batch 1 texts/s",
         "batch 1 p50 ms"],
        [
            [*astuple(config), ",".join(str(n) for n in sorted({int(r["threads"]) for r in rs})),
             _fmt([r["b32"] for r in rs]), _fmt([r["b1"] for r in rs]),
             _fmt([r["b1_p50_ms"] for r in rs], 2)]
            for config, rs in runs.items()
        ],
        "lllrrrr",
    )  # fmt: skip
    report.write(args.out, "torch threads and OpenMP wait policy beside other work (CPU)")


if __name__ == "__main__":
    main()
