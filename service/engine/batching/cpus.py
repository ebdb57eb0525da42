"""The CPUs this process may use, and how torch's OpenMP threads wait between parallel regions.

**How many.** torch starts one intra-op thread per CPU in the process's affinity mask (or
``OMP_NUM_THREADS``), but it does not read the cgroup CPU quota: in ``docker run --cpus 1`` on an
8-core host it starts 8 threads, which the kernel lets run for 1/8 of each scheduling period
before throttling them all, and every parallel region then waits for the slowest. So the default
count (``torch_threads`` 0) is the least of the host's CPUs, the affinity mask
(``os.sched_getaffinity``: ``taskset``, ``docker run --cpuset-cpus``) and the quota (cgroup v2
``cpu.max``, cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: what ``--cpus`` and a
Kubernetes CPU limit set), rounded down and at least 1. The quota is read along the process's
cgroup path up to the root, so a limit on a parent slice counts too (as Go's runtime and the
JVM read it). The parsing is pure (:func:`usable_cpus` and the ``*_cpus`` helpers take the files'
text), the reading is :func:`available_cpus`.

**How they wait.** Between parallel regions libgomp (the OpenMP runtime torch's PyPI wheels
bundle) keeps its helper threads spinning for a while (``OMP_WAIT_POLICY`` unset: 300,000 spins;
``ACTIVE``: indefinitely; see ``GOMP_SPINCOUNT`` in the libgomp manual). On a CPU the server has to itself that saves a wake-up per region; on
a CPU shared with any other busy process the spinning helpers take the time slices the thread
doing the work needs, and every region waits for a helper the scheduler has parked. ``PASSIVE``
puts idle helpers to sleep at once. Measured in ``benchmarks/text/threads.py`` (results in
``benchmarks/results/threads-cpu.md``); the ``omp_wait_policy`` setting picks it, and
:func:`openmp_env` exports it before torch loads, since the runtime reads it only once.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
# cgroup v1 mounts the cpu controller alone or together with cpuacct, depending on the distribution.
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def quota_cpus(quota: str | int, period: str | int) -> int | None:
    """Whole CPUs a CFS quota allows: ``quota / period`` rounded down, at least 1; None when
    there is no quota (``max`` in cgroup v2, ``-1`` in v1) or the values make no sense."""
    if str(quota).strip() in ("max", "-1"):
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    if q <= 0 or p <= 0:
        return None
    return max(1, q // p)


def cpu_max_cpus(text: str) -> int | None:
    """Whole CPUs from the text of a cgroup v2 ``cpu.max`` (``"<quota> <period>"``, e.g.
    ``"150000 100000"`` -> 1, ``"max 100000"`` -> None)."""
    parts = text.split()
    return quota_cpus(parts[0], parts[1]) if len(parts) == 2 else None


def usable_cpus(
    cpu_count: int | None,
    affinity: Collection[int] | None = None,
    quotas: Iterable[int | None] = (),
) -> int:
    """The CPUs a process may keep busy: the least of the host's count, the affinity mask's
    size and every quota that applies (None: unknown or no limit); at least 1."""
    limits = [n for n in (cpu_count, len(affinity) if affinity else None, *quotas) if n]
    return max(1, min(limits)) if limits else 1


def cgroup_paths(proc_self_cgroup: str, controller: str | None) -> list[str]:
    """The process's cgroup and its ancestors, leaf first, for one v1 controller (``"cpu"``)
    or the v2 unified hierarchy (None), from the text of ``/proc/self/cgroup``."""
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        unified = hierarchy == "0" and controllers == ""
        if (controller is None and unified) or (
            controller is not None and controller in controllers.split(",")
        ):
            parts = [p for p in path.strip().split("/") if p]
            return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]
    return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cgroup_quotas(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> list[int]:
    """Every CPU quota (in whole CPUs) on the process's cgroup and its ancestors, v2 and v1.

    Inside a container the cgroup namespace makes the container's own cgroup the root of the
    mount (``0::/``), so its ``cpu.max`` is read at ``root`` itself."""
    membership = _read(proc_self_cgroup) or ""
    found: list[int | None] = []
    for rel in cgroup_paths(membership, None) or [""]:
        text = _read(root / rel / "cpu.max")
        found.append(cpu_max_cpus(text) if text else None)
    for rel in cgroup_paths(membership, "cpu") or [""]:
        for mount in V1_CPU_MOUNTS:
            folder = root / mount / rel
            quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
            if quota and period:
                found.append(quota_cpus(quota.strip(), period.strip()))
    return [n for n in found if n]


@dataclass(frozen=True)
class Cpus:
    """What :func:`available_cpus` found: the host's CPUs, the affinity mask, the quotas."""

    host: int
    affinity: int | None
    quota: int | None

    @property
    def usable(self) -> int:
        return usable_cpus(self.host, range(self.affinity or 0), [self.quota])

    def __str__(self) -> str:
        quota = f"a quota of {self.quota}" if self.quota else "no quota"
        mask = f"{self.affinity} in the affinity mask" if self.affinity else "no affinity mask"
        return f"{self.usable} usable ({self.host} on the host, {mask}, {quota})"


def detect_cpus() -> Cpus:
    """Read the host's CPU count, this process's affinity mask and its cgroup quotas."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        affinity = None
    quotas = cgroup_quotas()
    return Cpus(os.cpu_count() or 1, affinity, min(quotas) if quotas else None)


def available_cpus() -> int:
    """The CPUs this process may keep busy (see the module docstring)."""
    return detect_cpus().usable


# ------------------------------------------------------------------------------------ OpenMP

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"


def openmp_env(policy: str, environ: Mapping[str, str], explicit: bool) -> dict[str, str]:
    """The OpenMP variables to export before torch loads for the ``omp_wait_policy`` setting:
    ``OMP_WAIT_POLICY`` = ``policy`` upper-cased (``default``: nothing, OpenMP's own). An
    ``OMP_WAIT_POLICY`` already in ``environ`` is kept unless the setting was given explicitly
    (a flag or ``ATTNSERVE_OMP_WAIT_POLICY``): explicit setting > environment > default."""
    if policy == "default" or (WAIT_POLICY_ENV in environ and not explicit):
        return {}
    return {WAIT_POLICY_ENV: policy.upper()}


def torch_threads_default(torch_default: int) -> int:
    """The intra-op thread count for ``torch_threads`` 0: torch's own default (which follows
    ``OMP_NUM_THREADS`` when set, else the affinity mask), never more than the usable CPUs."""
    return max(1, min(torch_default, available_cpus()))
