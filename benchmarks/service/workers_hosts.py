"""What ``workers`` auto starts on hosts of every size: simulated, not run.

    .venv/bin/python -m benchmarks.service.workers_hosts [--cpus 1 2 4 ...] [--out PATH]

The CI machine has 2 CPUs, so larger hosts cannot be measured here. This script feeds fake
host readings (CPU count, ``OMP_NUM_THREADS``, ``torch_threads``, available memory) to the same
functions ``attnserve serve`` calls (:func:`service.runtime.auto_workers.choose_workers` for the
count, :func:`service.runtime.workers.worker_settings` for each worker's threads) and tabulates
processes x threads, the CPUs left idle and the memory the processes are estimated to hold. What
one and two real CPUs give through HTTP is measured by ``benchmarks.service.threads_http``
(``--cases quiet taskset``: defaults on both CPUs and under ``taskset -c 0``).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, command, table, write
from service.runtime.auto_workers import (
    GIB,
    MAX_AUTO_WORKERS,
    choose_workers,
    process_bytes,
)
from service.runtime.workers import worker_settings
from service.settings import DEFAULT_MODELS, Settings

HOST_SIZES = [1, 2, 3, 4, 6, 8, 9, 12, 16, 24, 32, 48, 64, 96, 128, 192]
# (label, torch_threads, OMP_NUM_THREADS): the settings an operator is likely to leave or set.
VARIANTS = [
    ("defaults", 0, None),
    ("OMP_NUM_THREADS=1", 0, "1"),
    ("OMP_NUM_THREADS=2", 0, "2"),
    ("OMP_NUM_THREADS=4", 0, "4"),
    ("--torch-threads 8", 8, None),
]
PLENTY = 1024 * GIB


def row(cpus: int, torch_threads: int, omp: str | None, available: int, per: int) -> list[str]:
    """One simulated host: the count, the threads each worker runs, idle CPUs, memory held."""
    choice = choose_workers(
        0,
        cpus=cpus,
        torch_threads=torch_threads,
        omp_threads=int(omp) if omp else None,
        device="cpu",
        process_bytes=per,
        available_bytes=available,
    )
    environ = {"OMP_NUM_THREADS": omp} if omp else {}
    settings = Settings(workers=choice.workers, torch_threads=torch_threads)
    threads = worker_settings(settings, cpus=cpus, environ=environ).torch_threads
    busy = choice.workers * threads
    return [
        str(cpus),
        f"{choice.workers} x {threads}",
        str(max(0, cpus - busy)) if busy <= cpus else f"oversubscribed x{busy / cpus:.1f}",
        f"{choice.workers * per / GIB:.1f}",
    ]


def page(sizes: list[int], argv: list[str]) -> str:
    """The results page: one table per variant, then the memory-capped case."""
    per = process_bytes(DEFAULT_MODELS, None, 1)
    columns = ["usable CPUs", "processes x threads", "CPUs idle", "GiB held (estimate)"]
    lines = [
        f"`.venv/bin/{command('benchmarks.service.workers_hosts', argv)}`",
        "",
        f"# `workers` auto on simulated hosts ({datetime.now(UTC):%Y-%m-%d})",
        "",
        "**Simulated, not run**: this machine has 2 CPUs. The host readings are fed to the "
        "functions `attnserve serve` calls (`choose_workers`, `worker_settings`); the memory "
        f"estimate is the default models' ({per / GIB:.2f} GiB a process, from the files). "
        f"Automatic cap: {MAX_AUTO_WORKERS} processes. Measured on 1 and 2 real CPUs "
        "(`taskset -c 0` against both): `workers-hosts-http-cpu.md`.",
        "",
    ]
    for label, torch_threads, omp in VARIANTS:
        rows = [row(n, torch_threads, omp, PLENTY, per) for n in sizes]
        lines += [f"## {label}, memory plenty", "", table(columns, rows, "rlrr"), ""]
    tight = 4 * GIB
    rows = [row(n, 0, None, tight, per) for n in sizes]
    lines += [
        f"## defaults, {tight // GIB} GiB available (half for the processes)",
        "",
        "The memory cap lowers the count; each worker then takes the CPUs / workers threads.",
        "",
        table(columns, rows, "rlrr"),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.sizes("--cpus", HOST_SIZES, "usable CPU counts to simulate"),
        cli.out(RESULTS / "workers-hosts.md"),
    )
    args = cli.parse(parser, argv, cpus=[1, 16])
    text = page(args.cpus, sys.argv[1:] if argv is None else list(argv))
    print(text)
    write(args.out, text)


if __name__ == "__main__":
    main()
