"""Default thread count and OpenMP wait policy through HTTP, on a shared, pinned or quota'd CPU.

    sudo .venv/bin/python -m benchmarks.service.threads_http [--seconds 6] [--warmup 2] [--rounds 2]

Issue 37 item 2 (``torch_threads`` 0 follows the CPU quota and affinity mask; ``attnserve serve``
exports ``OMP_WAIT_POLICY=PASSIVE``) through the server, where ``benchmarks/text/threads.py``
measured it in-process: ``/encode`` at ``--clients`` and at 1 client, one server at a time (its
tree checked gone before the next), no ``OMP_*`` / ``MKL_NUM_THREADS`` in its environment. Each
case of :data:`CASES` beside its reference (the ratio is of req/s at ``--clients``):

* ``quiet`` (defaults) and ``quiet-old`` (``--omp-wait-policy default``, libgomp's spinning: the
  behaviour before the change);
* ``neighbour`` and ``neighbour-old``: the same beside a process spinning on one core, each
  against its quiet twin;
* ``taskset`` (``taskset -c 0``) and ``quota`` (a scratch cgroup with a one-CPU CFS quota: needs
  root) against the same with ``--torch-threads 1``.

``--rounds`` rounds, the case order reversed every other round. ``--smoke``: the ``quiet`` case,
one short round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model
from benchmarks.harness.load import HOST, LoadResult, run_load, say
from benchmarks.harness.process import ROOT, TEXT_MODEL, free_port, neighbour
from benchmarks.harness.report import RESULTS, command, table, write
from benchmarks.harness.timing import percentile
from benchmarks.peers.servers import PEERS, Launch, PeerServer
from benchmarks.service import common
from benchmarks.service.common import alternated, per_round, pooled
from benchmarks.service.workloads import short_texts

CGROUP = Path("/sys/fs/cgroup")
SCRATCH = "attnserve-bench-quota"


@dataclass(frozen=True)
class Case:
    """One server configuration: extra flags, a command prefix, a spinning neighbour or not,
    and the case its throughput is compared with."""

    name: str
    flags: tuple[str, ...] = ()
    wrap: str = ""  # "taskset" or "quota"
    neighbour: bool = False
    reference: str | None = None
    target: float | None = None


CASES = (
    Case("quiet"),
    Case("quiet-old", ("--omp-wait-policy", "default")),
    Case("neighbour", neighbour=True, reference="quiet", target=0.5),
    Case("neighbour-old", ("--omp-wait-policy", "default"), neighbour=True, reference="quiet-old"),
    Case("taskset", wrap="taskset", reference="taskset-t1", target=0.8),
    Case("taskset-t1", ("--torch-threads", "1"), wrap="taskset"),
    Case("quota", wrap="quota", reference="quota-t1", target=0.9),
    Case("quota-t1", ("--torch-threads", "1"), wrap="quota"),
)


# ----------------------------------------------------------------------------- cgroup


def scratch_cgroup() -> tuple[Path, str]:
    """A one-CPU quota cgroup (v2 where the cpu controller is there, else v1): its directory
    and which version."""
    v2 = CGROUP / "cgroup.controllers"
    if v2.is_file() and "cpu" in v2.read_text().split():
        path = CGROUP / SCRATCH
        path.mkdir(exist_ok=True)
        (path / "cpu.max").write_text("100000 100000")
        return path, "v2"
    path = CGROUP / "cpu" / SCRATCH
    path.mkdir(exist_ok=True)
    (path / "cpu.cfs_period_us").write_text("100000")
    (path / "cpu.cfs_quota_us").write_text("100000")
    return path, "v1"


def remove_cgroup(path: Path) -> None:
    """Remove the scratch cgroup (empty by now: every server was stopped)."""
    procs = (path / "cgroup.procs").read_text().split()
    if procs:
        raise RuntimeError(f"{path} still holds processes {procs}")
    path.rmdir()


# ----------------------------------------------------------------------------- servers


def server_command(case: Case, launch: Launch, cgroup: Path | None) -> list[str]:
    """``attnserve serve`` for ``case``: the peers' attnserve command (max batch 32) without
    its ``--torch-threads``, plus the case's flags, under its prefix."""
    base = PEERS["attnserve"].command(launch)
    k = base.index("--torch-threads")
    argv = [*base[:k], *base[k + 2 :], "--log-level", "info", *case.flags]
    if case.wrap == "taskset":
        return ["taskset", "-c", "0", *argv]
    if case.wrap == "quota":
        assert cgroup is not None
        return ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *argv]
    return argv


def case_server(case: Case, launch: Launch, log: Path, cgroup: Path | None) -> PeerServer:
    """attnserve with the case's command and an environment free of the OpenMP and MKL thread
    variables, so the server's own defaults decide."""
    drop = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    command = server_command(case, launch, cgroup)
    return PeerServer(PEERS["attnserve"], launch, log, env=env, command=command)


@dataclass
class Run:
    """One server's runs: results per client count, how it ended, what it logged."""

    results: dict[int, LoadResult]
    stopped: str
    load: str
    intra_op: str = "?"


def run_case(
    case: Case,
    requests: Callable[[int], list[bytes]],
    counts: list[int],
    args: argparse.Namespace,
    cgroup: Path | None,
) -> Run:
    """Start ``case``'s server, drive it at each client count (a neighbour spinning beside it
    if the case says so), stop it and check its tree is gone."""
    launch = Launch(free_port(), 0, ROOT, Path(sys.executable), Path(), Path())
    log = args.log_dir / f"threads-http-{case.name}.log"
    server = case_server(case, launch, log, cgroup)
    results: dict[int, LoadResult] = {}
    try:
        server.wait_answering("warm up")
        with neighbour(case.neighbour):
            for clients in counts:
                results[clients] = run_load(
                    HOST, launch.port, requests(launch.port), clients, args.seconds, args.warmup
                )
    finally:
        stopped = server.stop()
    loads = f"{results[counts[0]].load[0]} -> {results[counts[-1]].load[1]}" if results else ""
    return Run(results, stopped.signal, loads)


# ----------------------------------------------------------------------------- page


def intra_op_line(log: Path) -> str:
    """The server's ``torch intra-op threads: ...`` start-up line (logged at info)."""
    for line in log.read_text().splitlines():
        if "intra-op threads" in line:
            return line.split("torch intra-op threads: ", 1)[-1].strip()
    return "?"


def page(
    runs: dict[str, list[Run]], counts: list[int], args: argparse.Namespace, extra: str
) -> str:
    top = counts[0]

    def rps(name: str) -> float:
        return statistics.median(r.results[top].throughput for r in runs[name])

    lines = [
        f"# Default threads and OpenMP wait policy through HTTP ({datetime.now(UTC):%Y-%m-%d})",
        "",
        f"`sudo .venv/bin/{command('benchmarks.service.threads_http', args.argv)}`",
        "",
        f"`attnserve serve --models {TEXT_MODEL} --max-batch-size 32` (flash, float32), no "
        "`OMP_*` variables in its environment, plus each case's flags; `/encode`, one text of "
        "8-24 words per request; lean raw-asyncio driver, closed-loop keep-alive clients, "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured at {top} clients then at 1; "
        f"{args.rounds} rounds, case order reversed every other round; req/s median over "
        f"rounds, percentiles pooled. CPU: {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"otherwise quiet. {extra}",
        "",
    ]
    rows = []
    for case in CASES:
        if case.name not in runs:
            continue
        rs = runs[case.name]
        top_ms = pooled([r.results[top] for r in rs])
        one = pooled([r.results[1] for r in rs]) if 1 in counts else []
        ratio = rps(case.name) / rps(case.reference) if case.reference in runs else None
        met = "" if case.target is None or ratio is None else (
            "met" if ratio >= case.target else "missed"
        )  # fmt: skip
        prefix = {"taskset": "taskset -c 0 ", "quota": "(1-CPU quota) "}.get(case.wrap, "")
        server = f"{prefix}defaults {' '.join(case.flags)}".strip() + (
            " + spinning neighbour" if case.neighbour else ""
        )
        rows.append(
            [
                case.name,
                f"`{server}`",
                rs[0].intra_op,
                f"{rps(case.name):.1f} ({per_round([r.results[top].throughput for r in rs])})",
                f"{percentile(top_ms, 50):.1f} / {percentile(top_ms, 99):.1f}",
                f"{percentile(one, 50):.1f}" if one else "-",
                case.reference or "-",
                f"{ratio:.2f}x" if ratio is not None else "-",
                "" if case.target is None else f">= {case.target:g}x",
                met,
                "; ".join(r.load for r in rs),
            ]
        )
    columns = (
        f"case | server | threads (start-up log) | req/s c={top} (per round) | p50 / p99 ms "
        f"c={top} | c=1 p50 ms | reference | ratio | target | met | load avg before -> after"
    ).split(" | ")
    lines.append(table(columns, rows, "lllrrrlrrll"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        common.load_options(6.0),
        cli.rounds(2),
        cli.out(RESULTS / "threads-http-cpu.md"),
        cli.names("--cases", [c.name for c in CASES]),
    )
    args = cli.parse(parser, argv, **common.SMOKE, rounds=1, cases=["quiet"])
    args.argv = sys.argv[1:] if argv is None else argv
    texts = short_texts(512)

    def requests(port: int) -> list[bytes]:
        return [PEERS["attnserve"].request(port, t) for t in texts]

    counts = sorted({args.clients, 1}, reverse=True)
    cases = [c for c in CASES if c.name in args.cases]
    cgroup, version = (None, "")
    if any(c.wrap == "quota" for c in cases):
        cgroup, version = scratch_cgroup()
    runs: dict[str, list[Run]] = {}
    try:
        for k in range(args.rounds):
            for case in alternated(cases, k):
                run = run_case(case, requests, counts, args, cgroup)
                run.intra_op = intra_op_line(args.log_dir / f"threads-http-{case.name}.log")
                runs.setdefault(case.name, []).append(run)
                say(
                    f"round {k + 1} {case.name:>13}:",
                    run.results[counts[0]],
                    f"  c=1 p50 {run.results[1].pct(50):5.1f} ms  threads {run.intra_op}  "
                    f"load {run.load}  stopped {run.stopped}",
                )
                time.sleep(1.0)
    finally:
        if cgroup is not None:
            remove_cgroup(cgroup)
    extra = (
        f"Quota cgroup: cgroup {version} (`{cgroup}`), removed afterwards."
        if cgroup is not None
        else ""
    )
    text = page(runs, counts, args, extra)
    print(text)
    write(args.out, text)


if __name__ == "__main__":
    main()
