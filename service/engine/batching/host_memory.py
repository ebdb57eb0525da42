"""The host's memory as this process sees it: what is still available and the most it may hold,
within a container's cgroup memory limit. No torch here: the supervisor of several workers reads
it before any model loads (:mod:`service.runtime.auto_workers`), the device runtime after.

The limit is read along the process's own cgroup path (``/proc/self/cgroup``), leaf first and
up through every parent, and the tightest wins: a limit set on a parent slice (a systemd slice,
a Kubernetes pod above its container, a job scheduler's allocation) binds the process as much as
one on its own cgroup (cgroup v2: ``memory.max`` / ``memory.current``, kernel
``Documentation/admin-guide/cgroup-v2.rst``; v1: ``memory.limit_in_bytes`` /
``memory.usage_in_bytes`` under the memory controller's mount, ``cgroup-v1/memory.rst``).
The CPU quota is read the same way (:mod:`service.engine.batching.cpus`).
"""

from __future__ import annotations

from pathlib import Path

import psutil

from service.engine.batching.cpus import CGROUP_ROOT, PROC_SELF_CGROUP, cgroup_paths

# v1 reports "no limit" as a huge number (the page-rounded largest signed 64-bit value).
NO_LIMIT = 2**60
# (controller for /proc/self/cgroup, mount folder, limit file, usage file): v2, then v1.
_LAYOUTS = (
    (None, "", "memory.max", "memory.current"),
    ("memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
)


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2's no limit) is None too


def cgroup_memory_limits(
    root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> list[tuple[int, int | None]]:
    """Every memory limit on the process's cgroup and its ancestors, v2 and v1, as
    ``(limit, usage)`` in bytes (usage None when unreadable).

    Inside a container the cgroup namespace makes the container's own cgroup the root of the
    mount (``0::/``), and without one a v1 mount may start at the container's cgroup while
    ``/proc/self/cgroup`` names the host's path: missing folders are skipped, and the root is
    always read."""
    try:
        membership = proc_self_cgroup.read_text()
    except OSError:
        membership = ""
    found: list[tuple[int, int | None]] = []
    for controller, mount, limit_file, usage_file in _LAYOUTS:
        for rel in cgroup_paths(membership, controller) or [""]:
            folder = root / mount / rel
            limit = _number(folder / limit_file)
            if limit is not None and limit < NO_LIMIT:
                found.append((limit, _number(folder / usage_file)))
    return found


def available_host_memory(
    root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> int:
    """RAM this process could still use: the host's available memory, or less where a cgroup
    on its path (a container's memory limit, a parent slice's) has less headroom left."""
    available = int(psutil.virtual_memory().available)
    for limit, usage in cgroup_memory_limits(root, proc_self_cgroup):
        available = min(available, max(0, limit - (usage or 0)))
    return available


def host_memory_limit(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> int:
    """The most resident memory this process's host or container allows: the tightest cgroup
    memory limit on its path where one is set, the host's total RAM otherwise."""
    total = int(psutil.virtual_memory().total)
    return min([total, *(limit for limit, _ in cgroup_memory_limits(root, proc_self_cgroup))])
