"""Default threads, processes and OpenMP wait policy through HTTP, on shared, pinned or capped CPUs.

    .venv/bin/python -m benchmarks.service.threads_http [--seconds 6] [--warmup 2] [--rounds 2]
        [--cases ...] [--workloads encode forecast forecast-long] [--out PATH]

Issue 37 item 2 (``torch_threads`` 0 follows the CPU quota and affinity mask; ``attnserve serve``
exports ``OMP_WAIT_POLICY=PASSIVE``) and issue 45 item 4 (``workers`` auto: one process per
usable CPU) through the server, where ``benchmarks/text/threads.py`` measured threads in-process.
Each :data:`WORKLOADS` entry (``/encode`` of short texts with MiniLM; ``/forecast`` with a short-
and a long-context shipped Informer) is driven at ``--clients`` and at 1 client, one server at a
time (its tree checked gone before the next; every worker ready before the load), no ``OMP_*`` /
``MKL_NUM_THREADS`` in its environment. Each case of :data:`CASES` beside its reference (the
ratios are of req/s):

* ``quiet`` (defaults) and ``quiet-old`` (``--omp-wait-policy default``, libgomp's spinning: the
  behaviour before the change);
* ``neighbour`` and ``neighbour-old``: the same beside a process spinning on one core, each
  against its quiet twin;
* ``taskset`` (``taskset -c 0``) and ``quota`` (a scratch cgroup with a one-CPU CFS quota: needs
  root, so run those two with ``sudo``) against the same with ``--torch-threads 1``;
* ``1-process`` (its threads the usable CPUs: the default before issue 45) and ``per-cpu`` (one
  process per usable CPU, one thread each: ``workers`` auto), quiet and beside (``-busy``) the
  spinning neighbour.

``--rounds`` rounds, the case order reversed every other round. ``--smoke``: the ``quiet`` case,
one short round.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model
from benchmarks.harness.load import HOST, LoadResult, build_request, run_load, say
from benchmarks.harness.process import ROOT, TEXT_MODEL, free_port, neighbour
from benchmarks.harness.report import RESULTS, command, table, write
from benchmarks.harness.timing import percentile
from benchmarks.peers.servers import PEERS, Launch, PeerServer
from benchmarks.service import common
from benchmarks.service.common import alternated, per_round, pooled
from benchmarks.service.workloads import short_texts
from service.engine.batching.cpus import available_cpus

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


CPUS = str(available_cpus())
CASES = (
    Case("quiet"),
    Case("quiet-old", ("--omp-wait-policy", "default")),
    Case("neighbour", neighbour=True, reference="quiet", target=0.5),
    Case("neighbour-old", ("--omp-wait-policy", "default"), neighbour=True, reference="quiet-old"),
    Case("taskset", wrap="taskset", reference="taskset-t1", target=0.8),
    Case("taskset-t1", ("--torch-threads", "1"), wrap="taskset"),
    Case("quota", wrap="quota", reference="quota-t1", target=0.9),
    Case("quota-t1", ("--torch-threads", "1"), wrap="quota"),
    Case("1-process", ("--workers", "1")),
    Case("per-cpu", ("--workers", CPUS), reference="1-process", target=1.0),
    Case("1-process-busy", ("--workers", "1"), neighbour=True),
    Case("per-cpu-busy", ("--workers", CPUS), neighbour=True, reference="1-process-busy", target=1),
)


@dataclass(frozen=True)
class Workload:
    """A model the server loads beside MiniLM and how one request to it reads."""

    model: str
    what: str


WORKLOADS = {
    "encode": Workload(TEXT_MODEL, "`/encode`, one text of 8-24 words per request, flash"),
    "forecast": Workload(
        "informer-etth1-h24",
        "`/forecast` informer-etth1-h24 (context 96), one ETTh1 test window per request "
        "(base64 columns), the model's default attention",
    ),
    "forecast-long": Workload(
        "informer-ettm1-h288-c2048",
        "`/forecast` informer-ettm1-h288-c2048 (context 2,048), one ETTm1 test window per "
        "request (base64 columns), the model's default attention",
    ),
}


def served_models(workloads: list[str]) -> list[str]:
    """What the server loads: MiniLM (its first answer is the warm-up) and each workload's model."""
    return list(dict.fromkeys([TEXT_MODEL, *(WORKLOADS[w].model for w in workloads)]))


def workload_requests(name: str, port: int) -> list[bytes]:
    """The request bytes of workload ``name`` for a server on ``port``."""
    if name == "encode":
        return [PEERS["attnserve"].request(port, t) for t in short_texts(512)]
    from benchmarks.forecast.common import request_body, test_windows
    from models.informer.checkpoint import shipped_dirs

    model = WORKLOADS[name].model
    channels, windows = test_windows(shipped_dirs()[model], 64)
    bodies = [request_body(s, v, channels, "base64", model=model) for s, v in windows]
    return [build_request(HOST, port, "/forecast", body) for body in bodies]


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


def server_command(case: Case, launch: Launch, cgroup: Path | None, models: list[str]) -> list[str]:
    """``attnserve serve`` for ``case``: the peers' attnserve command (max batch 32) of
    ``models``, without its ``--torch-threads`` and ``--workers``, plus the case's flags, under
    its prefix."""
    argv = PEERS["attnserve"].command(launch)
    argv[argv.index("--models") + 1] = ",".join(models)
    for flag in ("--torch-threads", "--workers"):
        del argv[argv.index(flag) : argv.index(flag) + 2]
    argv += ["--log-level", "info", *case.flags]
    if case.wrap == "taskset":
        return ["taskset", "-c", "0", *argv]
    if case.wrap == "quota":
        assert cgroup is not None
        return ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *argv]
    return argv


def case_server(
    case: Case, launch: Launch, log: Path, cgroup: Path | None, models: list[str]
) -> PeerServer:
    """attnserve with the case's command and an environment free of the OpenMP and MKL thread
    variables, so the server's own defaults decide."""
    drop = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    command = server_command(case, launch, cgroup, models)
    return PeerServer(PEERS["attnserve"], launch, log, env=env, command=command)


def wait_all_workers(log: Path, timeout: float = 300.0) -> int:
    """Wait until every worker process of the server logging to ``log`` is ready (a worker
    joins the shared port only then, so load started earlier would meet fewer of them);
    return how many there are (the supervisor's start-up line, else one)."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text()
        started = re.search(r"supervisor \d+: (\d+) workers", text)
        workers = int(started.group(1)) if started else 1
        if text.count("attnserve: ready in") >= workers:
            return workers
        if time.monotonic() > deadline:
            raise RuntimeError(f"not every worker was ready in {timeout} s; see {log}")
        time.sleep(0.2)


@dataclass
class Run:
    """One server's runs: results per (workload, client count), how it ended, the load
    average, its start-up lines."""

    results: dict[tuple[str, int], LoadResult]
    stopped: str
    load: str
    intra_op: str = "?"
    processes: int = 1

    def cores(self, key: tuple[str, int]) -> float:
        """The server's CPU (all its processes) over that window, in cores busy."""
        result = self.results[key]
        return result.cpu_s.get("server", float("nan")) / result.seconds


def run_case(
    case: Case,
    workloads: list[str],
    counts: list[int],
    args: argparse.Namespace,
    cgroup: Path | None,
) -> Run:
    """Start ``case``'s server, drive each workload at each client count (a neighbour spinning
    beside it if the case says so), stop it and check its tree is gone."""
    launch = Launch(free_port(), 0, ROOT, Path(sys.executable), Path(), Path())
    log = args.log_dir / f"threads-http-{case.name}.log"
    models = served_models(workloads)
    server = case_server(case, launch, log, cgroup, models)
    results: dict[tuple[str, int], LoadResult] = {}
    processes = 1
    try:
        server.wait_answering("warm up")
        processes = wait_all_workers(log)
        probes = {"server": server.cpu_seconds}
        with neighbour(case.neighbour):
            for name in workloads:
                wire = workload_requests(name, launch.port)
                for clients in counts:
                    results[name, clients] = run_load(
                        HOST, launch.port, wire, clients, args.seconds, args.warmup, probes
                    )
    finally:
        stopped = server.stop()
    windows = list(results.values())
    loads = f"{windows[0].load[0]} -> {windows[-1].load[1]}" if windows else ""
    return Run(results, stopped.signal, loads, processes=processes)


# ----------------------------------------------------------------------------- page


def intra_op_line(log: Path) -> str:
    """The server's ``torch intra-op threads: ...`` start-up line (logged at info)."""
    for line in log.read_text().splitlines():
        if "intra-op threads" in line:
            return line.split("torch intra-op threads: ", 1)[-1].strip()
    return "?"


def workload_table(runs: dict[str, list[Run]], workload: str, counts: list[int]) -> str:
    """One workload's table: a row per case, req/s and latency at each client count."""
    top = counts[0]

    def rps(name: str, clients: int) -> float:
        return statistics.median(r.results[workload, clients].throughput for r in runs[name])

    def ratio(case: Case, clients: int) -> float | None:
        if case.reference not in runs or clients not in counts:
            return None
        return rps(case.name, clients) / rps(case.reference, clients)

    rows = []
    for case in CASES:
        if case.name not in runs:
            continue
        rs = runs[case.name]
        cells = []
        for clients in counts:
            ms = pooled([r.results[workload, clients] for r in rs])
            per = per_round([r.results[workload, clients].throughput for r in rs])
            cells += [
                f"{rps(case.name, clients):.1f} ({per})",
                f"{percentile(ms, 50):.1f} / {percentile(ms, 99):.1f}",
            ]
        busy = statistics.median(r.cores((workload, top)) for r in rs)
        r_top, r_one = ratio(case, top), ratio(case, 1)
        met = "" if case.target is None or r_top is None else (
            "met" if r_top >= case.target else "missed"
        )  # fmt: skip
        prefix = {"taskset": "taskset -c 0 ", "quota": "(1-CPU quota) "}.get(case.wrap, "")
        server = f"{prefix}defaults {' '.join(case.flags)}".strip() + (
            " + spinning neighbour" if case.neighbour else ""
        )
        rows.append(
            [
                case.name,
                f"`{server}`",
                f"{rs[0].processes} x {rs[0].intra_op}",
                *cells,
                f"{busy:.2f}",
                case.reference or "-",
                " / ".join(f"{r:.2f}x" for r in (r_top, r_one) if r is not None) or "-",
                "" if case.target is None else f">= {case.target:g}x",
                met,
                "; ".join(r.load for r in rs),
            ]
        )
    per_count = [c for n in counts for c in (f"req/s c={n} (per round)", f"p50 / p99 ms c={n}")]
    ratios = " / ".join(f"c={n}" for n in counts)
    columns = [
        "case", "server", "processes x threads (start-up log)", *per_count,
        f"server cores busy c={top}", "reference", f"req/s ratio {ratios}", "target c=" + str(top),
        "met", "load avg before -> after",
    ]  # fmt: skip
    return table(columns, rows, "lll" + "rr" * len(counts) + "rlrrll")


def page(
    runs: dict[str, list[Run]],
    workloads: list[str],
    counts: list[int],
    args: argparse.Namespace,
    extra: str,
) -> str:
    sudo = "sudo " if any(c.wrap == "quota" for c in CASES if c.name in runs) else ""
    lines = [
        f"`{sudo}.venv/bin/{command('benchmarks.service.threads_http', args.argv)}`",
        "",
        "# Default threads, processes and OpenMP wait policy through HTTP "
        f"({datetime.now(UTC):%Y-%m-%d})",
        "",
        f"`attnserve serve --models {','.join(served_models(workloads))} "
        "--max-batch-size 32` (float32), no `OMP_*` variables in its environment, plus each "
        "case's flags; lean raw-asyncio driver (its own CPU and the server's probed), "
        f"closed-loop keep-alive clients, {args.warmup:g} s warm-up + {args.seconds:g} s "
        f"measured at {' then at '.join(map(str, counts))} clients, every worker ready first; "
        f"{args.rounds} rounds, case order reversed every other round; req/s median over "
        f"rounds, percentiles pooled. CPU: {cpu_model()}, {os.cpu_count()} logical CPUs. {extra}",
        "",
    ]
    for name in workloads:
        lines += [f"## {name}: {WORKLOADS[name].what}", "", workload_table(runs, name, counts), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        common.load_options(6.0),
        cli.rounds(2),
        cli.out(RESULTS / "threads-http-cpu.md"),
        cli.names("--cases", [c.name for c in CASES[:8]], choices=[c.name for c in CASES]),
        cli.names("--workloads", ["encode"], choices=list(WORKLOADS)),
    )
    args = cli.parse(parser, argv, **common.SMOKE, rounds=1, cases=["quiet"])
    args.argv = sys.argv[1:] if argv is None else argv
    counts = sorted({args.clients, 1}, reverse=True)
    cases = [c for c in CASES if c.name in args.cases]
    cgroup, version = (None, "")
    if any(c.wrap == "quota" for c in cases):
        cgroup, version = scratch_cgroup()
    runs: dict[str, list[Run]] = {}
    try:
        for k in range(args.rounds):
            for case in alternated(cases, k):
                run = run_case(case, args.workloads, counts, args, cgroup)
                run.intra_op = intra_op_line(args.log_dir / f"threads-http-{case.name}.log")
                runs.setdefault(case.name, []).append(run)
                for name in args.workloads:
                    say(
                        f"round {k + 1} {case.name:>22} {name:>13}:",
                        run.results[name, counts[0]],
                        f"  c=1 {run.results[name, 1].throughput:6.1f} req/s p50 "
                        f"{run.results[name, 1].pct(50):5.1f} ms  cores "
                        f"{run.cores((name, counts[0])):.2f}",
                    )
                print(
                    f"  {run.processes} x {run.intra_op}  load {run.load}  stopped {run.stopped}",
                    flush=True,
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
    text = page(runs, args.workloads, counts, args, extra)
    print(text)
    write(args.out, text)


if __name__ == "__main__":
    main()
