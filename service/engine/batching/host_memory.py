"""The host's memory as this process sees it: what is still available and the most it may hold,
within a container's cgroup memory limit. No torch here: the supervisor of several workers reads
it before any model loads (:mod:`service.runtime.auto_workers`), the device runtime after."""

from __future__ import annotations

from pathlib import Path

import psutil

_CGROUP_FILES = (  # (limit, usage): cgroup v2, then v1
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ),
)


def available_host_memory() -> int:
    """RAM this process could still use: the host's available memory, or less where a cgroup
    (a container's memory limit) allows less."""
    available = int(psutil.virtual_memory().available)
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            limit, usage = limit_file.read_text().strip(), int(usage_file.read_text())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # "max" / a huge v1 number: no limit
            available = min(available, max(0, int(limit) - usage))
        break
    return available


def host_memory_limit() -> int:
    """The most resident memory this process's host or container allows: the cgroup's memory
    limit where one is set, the host's total RAM otherwise."""
    total = int(psutil.virtual_memory().total)
    for limit_file, _usage in _CGROUP_FILES:
        try:
            limit = limit_file.read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and int(limit) < 2**60:
            return min(total, int(limit))
        break
    return total
