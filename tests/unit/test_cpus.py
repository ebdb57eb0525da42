"""The CPUs a process may use (host count, affinity mask, cgroup quota) and the OpenMP wait
policy the server exports: pure functions on the files' text, and the reader on fake cgroup
trees (no container needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.engine.batching import cpus
from service.engine.batching.cpus import (
    cgroup_paths,
    cgroup_quotas,
    cpu_max_cpus,
    openmp_env,
    quota_cpus,
    torch_threads_default,
    usable_cpus,
)
from service.runtime.workers import worker_settings
from service.settings import Settings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max 100000", None),  # no limit
        ("max 100000\n", None),
        ("150000 100000", 1),  # 1.5 CPUs: rounded down
        ("250000 100000", 2),
        ("100000 100000", 1),  # docker run --cpus 1
        ("50000 100000", 1),  # half a CPU: still one thread
        ("800000 100000\n", 8),
        ("", None),
        ("garbage", None),
        ("0 100000", None),
    ],
)
def test_cgroup_v2_cpu_max(text: str, expected: int | None) -> None:
    assert cpu_max_cpus(text) == expected


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("-1", "100000", None), ("200000", "100000", 2), ("150000", "100000", 1), ("x", "1", None)],
)
def test_cgroup_v1_cfs_quota(quota: str, period: str, expected: int | None) -> None:
    assert quota_cpus(quota, period) == expected


@pytest.mark.parametrize(
    ("count", "affinity", "quotas", "expected"),
    [
        (8, None, [], 8),
        (8, {0}, [], 1),  # taskset -c 0
        (8, {0, 1, 2, 3}, [None], 4),  # --cpuset-cpus 0-3, no quota
        (8, set(range(8)), [2], 2),  # --cpus 2
        (8, set(range(8)), [cpu_max_cpus("150000 100000")], 1),
        (8, {0, 1}, [4], 2),  # the mask is smaller than the quota
        (2, set(range(2)), [cpu_max_cpus("max 100000")], 2),
        (8, set(range(8)), [4, 3], 3),  # a parent slice's tighter limit counts
        (None, None, [], 1),  # nothing known: one thread
    ],
)
def test_usable_cpus_is_the_least_limit(
    count: int | None, affinity: set[int] | None, quotas: list[int | None], expected: int
) -> None:
    assert usable_cpus(count, affinity, quotas) == expected


def test_cgroup_paths_leaf_first() -> None:
    v2 = "0::/kubepods.slice/pod1/ctr\n"
    assert cgroup_paths(v2, None) == ["kubepods.slice/pod1/ctr", "kubepods.slice/pod1",
                                      "kubepods.slice", ""]  # fmt: skip
    assert cgroup_paths("0::/\n", None) == [""]  # inside a cgroup namespace
    v1 = "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n"
    assert cgroup_paths(v1, "cpu") == ["docker/abc", "docker", ""]
    assert cgroup_paths(v1, None) == []
    assert cgroup_paths("", "cpu") == []


def test_quotas_read_along_the_v2_hierarchy(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("0::/slice/leaf\n")
    (tmp_path / "slice" / "leaf").mkdir(parents=True)
    (tmp_path / "slice" / "leaf" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "slice" / "cpu.max").write_text("250000 100000\n")
    assert cgroup_quotas(tmp_path, membership) == [2]


def test_quota_at_the_namespace_root(tmp_path: Path) -> None:
    # docker run --cpus 1 with a private cgroup namespace: "0::/" and cpu.max at the mount root.
    membership = tmp_path / "cgroup"
    membership.write_text("0::/\n")
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert cgroup_quotas(tmp_path, membership) == [1]


def test_quotas_read_from_cgroup_v1(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("3:cpu,cpuacct:/docker/abc\n")
    group = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    group.mkdir(parents=True)
    (group / "cpu.cfs_quota_us").write_text("300000\n")
    (group / "cpu.cfs_period_us").write_text("100000\n")
    root = tmp_path / "cpu,cpuacct"
    (root / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quotas(tmp_path, membership) == [3]


def test_no_cgroup_files_means_no_quota(tmp_path: Path) -> None:
    assert cgroup_quotas(tmp_path, tmp_path / "missing") == []


def test_default_threads_follow_the_quota_and_never_exceed_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpus, "available_cpus", lambda: 1)
    assert torch_threads_default(8) == 1
    monkeypatch.setattr(cpus, "available_cpus", lambda: 4)
    assert torch_threads_default(2) == 2  # OMP_NUM_THREADS=2 (or Ray's num_cpus) is kept
    assert torch_threads_default(0) == 1


def test_workers_share_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.runtime.workers.available_cpus", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert worker_settings(Settings(workers=2)).torch_threads == 1
    assert worker_settings(Settings(workers=1)).torch_threads == 2
    assert worker_settings(Settings(workers=2, torch_threads=3)).torch_threads == 3


@pytest.mark.parametrize(
    ("policy", "environ", "explicit", "expected"),
    [
        ("passive", {}, False, {"OMP_WAIT_POLICY": "PASSIVE"}),  # the default
        ("passive", {"OMP_WAIT_POLICY": "active"}, False, {}),  # the user's variable wins
        ("active", {"OMP_WAIT_POLICY": "passive"}, True, {"OMP_WAIT_POLICY": "ACTIVE"}),
        ("default", {}, True, {}),  # OpenMP's own
    ],
)
def test_openmp_env(
    policy: str, environ: dict[str, str], explicit: bool, expected: dict[str, str]
) -> None:
    assert openmp_env(policy, environ, explicit) == expected
