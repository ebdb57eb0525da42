"""torch's CPU threads beside other work: thread count and OpenMP wait policy, quiet, beside a
spinning neighbour, and inside a one-CPU cgroup quota (issue 37, item 2).

    python -m benchmarks.text.threads                 # 3 rounds, writes benchmarks/results/threads-cpu.md
    python -m benchmarks.text.threads --rounds 1 --seconds 2 --no-quota

In-process, no HTTP: all-MiniLM-L6-v2 (``SentenceEncoder.load()``, flash, float32) encodes 20-word
texts from the stdlib-docstring corpus at batch 32 (texts/s) and one at a time (texts/s and the
median milliseconds per text). Every configuration runs in a fresh process, since the OpenMP
runtime reads ``OMP_WAIT_POLICY`` / ``GOMP_SPINCOUNT`` once, when torch loads.

- threads ``auto``: what the server now picks for ``torch_threads`` 0
  (:func:`service.engine.batching.cpus.torch_threads_default`: torch's count capped by the CPU quota);
  ``torch``: torch's own default (what the server used before; it ignores the quota); ``1``.
- wait policy: ``unset`` (libgomp's default: spin 300,000 times, then sleep), ``ACTIVE``,
  ``PASSIVE``, and ``GOMP_SPINCOUNT=10000`` (a short spin, then sleep).
- place: ``quiet``; ``neighbour``: beside one ``python -c 'while True: pass'`` process (not
  pinned), started before the measuring process and killed (and checked gone) after it;
  ``quota 1 CPU``: inside a cgroup v1 ``cpu`` group with ``cfs_quota_us = cfs_period_us`` (what
  ``docker run --cpus 1`` sets), made for the run and removed after it (needs root and a writable
  v1 cpu controller; skipped otherwise, or with ``--no-quota``).

Configurations alternate within each round (the start rotates per round) so that a slow spell of
a shared machine hits them alike; the table gives the median over rounds and the range.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.report import RESULTS
from benchmarks.host import cpu_model, load_average

QUOTA_GROUP = Path("/sys/fs/cgroup/cpu/attnserve-bench-threads")
POLICIES: dict[str, dict[str, str]] = {
    "unset": {},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
}


@dataclass(frozen=True)
class Config:
    place: str  # quiet | neighbour | quota
    threads: str  # auto | torch | 1
    policy: str  # a key of POLICIES

    @property
    def label(self) -> tuple[str, str, str]:
        place = {"quota": "quota 1 CPU"}.get(self.place, self.place)
        return place, self.threads, self.policy


@dataclass
class Cell:
    threads_used: list[int] = field(default_factory=list)
    b32: list[float] = field(default_factory=list)
    b1: list[float] = field(default_factory=list)
    b1_p50: list[float] = field(default_factory=list)


def configs(quota: bool) -> list[Config]:
    out: list[Config] = []
    for place in ("quiet", "neighbour"):
        out += [Config(place, "auto", p) for p in POLICIES]
        out.append(Config(place, "1", "unset"))
    if quota:
        out += [Config("quota", "torch", p) for p in ("unset", "PASSIVE")]
        out += [Config("quota", "auto", p) for p in ("unset", "PASSIVE")]
        out.append(Config("quota", "1", "unset"))
    return out


# ------------------------------------------------------------------------ the measuring process


def measure(threads: str, seconds: float) -> dict[str, float]:
    """Runs in the child: set the thread count, load the encoder, time both batch sizes."""
    import torch

    from models.text import SentenceEncoder
    from models.text.corpus import word_windows
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


# ------------------------------------------------------------------------ the driver


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def start_neighbour() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill a process this script started and make sure it is gone (reaped)."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    if not _gone(proc.pid):
        raise RuntimeError(f"process {proc.pid} is still there")


def make_quota_group() -> bool:
    try:
        QUOTA_GROUP.mkdir(exist_ok=True)
        period = (QUOTA_GROUP / "cpu.cfs_period_us").read_text().strip()
        (QUOTA_GROUP / "cpu.cfs_quota_us").write_text(period)  # one CPU
    except OSError as exc:
        print(f"no quota rows: {exc}", file=sys.stderr)
        return False
    return True


def remove_quota_group() -> None:
    if QUOTA_GROUP.exists():
        QUOTA_GROUP.rmdir()  # fails while a process is still inside: that would be a leak


def run_one(config: Config, seconds: float) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.pop("OMP_NUM_THREADS", None)
    env.update(POLICIES[config.policy])
    cmd = [sys.executable, "-m", "benchmarks.text.threads", "--child", config.threads, "--seconds"]
    cmd.append(str(seconds))
    if config.place == "quota":
        # Join the group before the interpreter starts, so torch never runs outside it.
        joined = " ".join(cmd)
        cmd = ["sh", "-c", f"echo $$ > {QUOTA_GROUP}/cgroup.procs && exec {joined}"]
    neighbour = start_neighbour() if config.place == "neighbour" else None
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True)
    finally:
        if neighbour is not None:
            stop(neighbour)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _fmt(values: list[float], digits: int = 0) -> str:
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def table(cells: dict[Config, Cell]) -> str:
    lines = [
        "| place | threads | wait policy | threads used | batch 32 texts/s | batch 1 texts/s "
        "| batch 1 p50 ms |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for config, cell in cells.items():
        place, threads, policy = config.label
        used = ",".join(str(n) for n in sorted(set(cell.threads_used)))
        lines.append(
            f"| {place} | {threads} | {policy} | {used} | {_fmt(cell.b32)} | {_fmt(cell.b1)} "
            f"| {_fmt(cell.b1_p50, 2)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="per batch size and process")
    parser.add_argument("--no-quota", action="store_true", help="skip the cgroup quota rows")
    parser.add_argument("--child", metavar="THREADS", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "threads-cpu.md")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.seconds)), flush=True)
        return
    quota = not args.no_quota and make_quota_group()
    load_before = load_average()
    order = configs(quota)
    cells = {c: Cell() for c in order}
    try:
        for round_ in range(args.rounds):
            shift = round_ * len(order) // max(1, args.rounds)
            for config in order[shift:] + order[:shift]:
                r = run_one(config, args.seconds)
                cell = cells[config]
                cell.threads_used.append(int(r["threads"]))
                cell.b32.append(r["b32"])
                cell.b1.append(r["b1"])
                cell.b1_p50.append(r["b1_p50_ms"])
                print(f"round {round_ + 1} {config.label}: {r}", flush=True)
    finally:
        if quota:
            remove_quota_group()
    command = "python -m benchmarks.text.threads " + " ".join(argv if argv is not None else sys.argv[1:])
    report = "\n".join(
        [
            "# torch threads and OpenMP wait policy beside other work (CPU)",
            "",
            f"`{command.strip()}` — {cpu_model()}, {os.cpu_count()} CPUs, python "
            f"{platform.python_version()}; load average before {load_before}, after "
            f"{load_average()}. {args.rounds} round(s), {args.seconds:g} s per batch size per "
            "process; median over rounds (range). See the script's docstring for what each "
            "column means. The machine is shared with other people's work, which this run "
            "cannot control: compare rows of one run, not absolute figures across runs.",
            "",
            table(cells),
            "",
        ]
    )
    args.out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
