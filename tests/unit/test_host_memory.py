"""The cgroup memory limit as this process sees it: read along its own cgroup path (leaf and every
parent, the tightest wins), cgroup v2 and v1, on fake ``/proc/self/cgroup`` and
``/sys/fs/cgroup`` trees (no container needed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from service.engine.batching import host_memory
from service.engine.batching.host_memory import (
    available_host_memory,
    cgroup_memory_limits,
    host_memory_limit,
)

GIB = 2**30
HOST_TOTAL, HOST_AVAILABLE = 64 * GIB, 48 * GIB


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with 64 GiB, 48 of them available, whatever this machine has."""
    fake = SimpleNamespace(total=HOST_TOTAL, available=HOST_AVAILABLE)
    monkeypatch.setattr(host_memory.psutil, "virtual_memory", lambda: fake)


def membership(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return path


def cgroup(root: Path, rel: str, **files: str) -> None:
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text + "\n")


def test_v2_a_parent_slice_limit_binds_the_leaf(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "0::/kubepods.slice/pod1/ctr\n")
    cgroup(root, "kubepods.slice/pod1/ctr", memory_max="max", memory_current=str(1 * GIB))
    cgroup(root, "kubepods.slice/pod1", memory_max=str(6 * GIB), memory_current=str(2 * GIB))
    cgroup(root, "kubepods.slice", memory_max=str(32 * GIB), memory_current=str(20 * GIB))
    assert cgroup_memory_limits(root, me) == [
        (6 * GIB, 2 * GIB),
        (32 * GIB, 20 * GIB),
    ]
    assert host_memory_limit(root, me) == 6 * GIB  # the tightest limit
    assert available_host_memory(root, me) == 4 * GIB  # the least headroom: 6 - 2 (not 32 - 20)


def test_v2_the_least_headroom_wins_even_under_a_larger_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "0::/a/b\n")
    cgroup(root, "a/b", memory_max=str(8 * GIB), memory_current=str(1 * GIB))
    cgroup(root, "a", memory_max=str(10 * GIB), memory_current=str(9 * GIB))  # siblings use it
    assert host_memory_limit(root, me) == 8 * GIB
    assert available_host_memory(root, me) == 1 * GIB


def test_v2_inside_a_cgroup_namespace_the_root_is_read(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "0::/\n")
    cgroup(root, "", memory_max=str(2 * GIB), memory_current=str(GIB // 2))
    assert host_memory_limit(root, me) == 2 * GIB
    assert available_host_memory(root, me) == 3 * GIB // 2


def test_v1_memory_controller_path_walked_up(tmp_path: Path) -> None:
    # A cgroup v1 host (as this project's CI machine): the memory controller has its own path.
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "4:memory:/process_api/abc\n1:cpu:/\n0::/\n")
    huge = str(9223372036854771712)  # v1's "no limit"
    cgroup(root, "memory/process_api/abc", memory_limit_in_bytes=huge)
    cgroup(
        root,
        "memory/process_api",
        memory_limit_in_bytes=str(3 * GIB),
        memory_usage_in_bytes=str(GIB),
    )
    cgroup(root, "memory", memory_limit_in_bytes=huge, memory_usage_in_bytes=str(5 * GIB))
    assert cgroup_memory_limits(root, me) == [(3 * GIB, GIB)]
    assert host_memory_limit(root, me) == 3 * GIB
    assert available_host_memory(root, me) == 2 * GIB


def test_v1_mount_at_the_container_cgroup_without_namespace(tmp_path: Path) -> None:
    # Docker on v1 without a cgroup namespace: /proc/self/cgroup names the host's path, the mount
    # holds only the container's own cgroup, so the walk finds it at the root.
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "9:memory:/docker/0123abcd\n")
    cgroup(root, "memory", memory_limit_in_bytes=str(GIB), memory_usage_in_bytes=str(GIB // 4))
    assert host_memory_limit(root, me) == GIB
    assert available_host_memory(root, me) == 3 * GIB // 4


def test_no_limit_anywhere_is_the_host(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "0::/user.slice/session\n")
    cgroup(root, "user.slice/session", memory_max="max", memory_current=str(GIB))
    assert cgroup_memory_limits(root, me) == []
    assert host_memory_limit(root, me) == HOST_TOTAL
    assert available_host_memory(root, me) == HOST_AVAILABLE
    assert host_memory_limit(tmp_path / "absent", tmp_path / "absent") == HOST_TOTAL


def test_a_limit_above_what_the_host_has_does_not_raise_it(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "0::/big\n")
    cgroup(root, "big", memory_max=str(512 * GIB), memory_current="0")
    assert host_memory_limit(root, me) == HOST_TOTAL
    assert available_host_memory(root, me) == HOST_AVAILABLE


def test_an_unreadable_usage_counts_the_whole_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    me = membership(tmp_path, "0::/x\n")
    cgroup(root, "x", memory_max=str(4 * GIB))
    assert cgroup_memory_limits(root, me) == [(4 * GIB, None)]
    assert available_host_memory(root, me) == 4 * GIB
