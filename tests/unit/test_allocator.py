"""Flat memory under varied shapes: the kernel caches are bounded, and freed heap memory is
returned to the kernel between batches (``service/engine/batching/allocator.py``; the
whole-server figure is ``loadtest/soak.py``'s)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from service.engine.batching import allocator, device
from service.engine.batching.device import DeviceRuntime

REPO = Path(__file__).resolve().parents[2]

# Runs fused linear layers (oneDNN) over 160 row counts, trimming after each, and prints the
# resident set after the first 40 shapes and after all of them.
SHAPES_SCRIPT = """
import json, sys
import service  # sets the cache bounds unless the environment has them
import torch
from torch import nn
from models.text.network import fused_linear
from service.engine.batching.allocator import trim
from service.engine.batching.device import proc_status_bytes
torch.manual_seed(0)
torch.set_num_threads(1)
layer = nn.Linear(384, 1536)
readings = []
with torch.inference_mode():
    for i, rows in enumerate(range(256, 256 + 8 * 160, 8)):
        fused_linear.linear_gelu(torch.randn(rows, 384), layer)
        trim()
        if i in (39, 159):
            readings.append(proc_status_bytes("VmRSS"))
print(json.dumps({"fused": fused_linear.ENABLED, "rss": readings}))
"""


def run_script(script: str, args: list[str], unset: tuple[str, ...], **env: str) -> dict:
    """The JSON a script prints last, run in a fresh interpreter without the ``unset``
    variables and with ``env``."""
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    environment.update(env, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=environment,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_shapes(**env: str) -> tuple[bool, float]:
    """(fused path on, resident growth in MiB from shape 40 to 160) in a fresh interpreter."""
    result = run_script(SHAPES_SCRIPT, [], allocator.KERNEL_CACHE_VARIABLES, **env)
    first, last = result["rss"]
    return result["fused"], (last - first) / 2**20


def test_bounded_kernel_caches_keep_memory_flat_across_new_shapes() -> None:
    fused, bounded = run_shapes()
    if not fused:
        pytest.skip("this torch build has no fused oneDNN linear: nothing to bound")
    _, unbounded = run_shapes(LRU_CACHE_CAPACITY="1024", ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024")
    assert unbounded > 40, (
        f"the control did not grow ({unbounded:.0f} MiB): the test proves nothing"
    )
    assert bounded < 15, f"resident memory grew {bounded:.0f} MiB over 120 new shapes"


def test_the_environment_wins_over_the_default_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # Set first so that monkeypatch restores whatever the variable was, even if it was unset.
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    allocator.bound_kernel_caches(capacity=5)
    assert os.environ["LRU_CACHE_CAPACITY"] == "7"
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "5"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_is_available_under_glibc_and_returns_freed_memory() -> None:
    assert allocator.can_trim()
    assert isinstance(allocator.trim(), bool)


def test_the_runtime_trims_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    # The runtime's clock, set by hand at a minute after boot: ``time.monotonic`` counts from
    # boot, so a runtime that took "never trimmed" for 0.0 would not trim until the machine
    # had been up for a whole interval.
    clock = [60.0]
    monkeypatch.setattr(device, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    trims: list[float] = []  # the clock at each trim

    def trim() -> bool:
        trims.append(clock[0])
        return True

    monkeypatch.setattr(allocator, "trim", trim)
    timers = FakeTimers()
    monkeypatch.setattr(device.threading, "Timer", timers)

    off = DeviceRuntime(torch.device("cpu"), trim_interval_s=0)
    assert not off.after_batch()
    assert trims == []
    runtime = DeviceRuntime(torch.device("cpu"), trim_interval_s=3600)
    assert runtime.after_batch()  # the first batch: due at once, however long the host is up
    clock[0] += 3599
    assert not runtime.after_batch()  # within the hour: not again
    clock[0] += 1
    assert runtime.after_batch()  # an hour after the last trim: due again
    assert trims == [60.0, 3660.0]

    measuring = DeviceRuntime(torch.device("cpu"), trim_interval_s=3600)
    baseline = measuring.reset_peak()
    assert not measuring.after_batch()  # another batch is being measured: leave its pages
    measuring.peak_above(baseline)
    assert measuring.after_batch()
    assert trims == [60.0, 3660.0, 3660.0]


class FakeTimers:
    """Stands in for ``threading.Timer``: records each timer's wait and callback, fires on
    :meth:`fire`."""

    def __init__(self) -> None:
        self.armed: list[tuple[float, object]] = []

    def __call__(self, wait: float, callback: object) -> SimpleNamespace:
        self.armed.append((wait, callback))
        return SimpleNamespace(daemon=False, start=lambda: None, cancel=lambda: None)

    def fire(self) -> None:
        _, callback = self.armed.pop(0)
        callback()  # type: ignore[operator]


def test_memory_freed_outside_or_after_the_last_batch_is_trimmed_without_another_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A refused request never reaches a batch, and the last batch of a burst may come within
    # the interval of the previous trim: both used to wait for the next batch to be trimmed.
    clock = [60.0]
    monkeypatch.setattr(device, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    trims: list[float] = []
    monkeypatch.setattr(allocator, "trim", lambda: trims.append(clock[0]) or True)
    monkeypatch.setattr(allocator, "can_trim", lambda: True)
    timers = FakeTimers()
    monkeypatch.setattr(device.threading, "Timer", timers)
    runtime = DeviceRuntime(torch.device("cpu"), trim_interval_s=10)

    runtime.trim_later()  # never trimmed: due at once
    runtime.trim_later()  # one timer at a time
    assert [wait for wait, _ in timers.armed] == [0.0]
    timers.fire()
    assert trims == [60.0]

    clock[0] += 4
    assert not runtime.after_batch()  # not due: a timer for the rest of the interval
    assert [wait for wait, _ in timers.armed] == [6.0]
    clock[0] += 6
    timers.fire()
    assert trims == [60.0, 70.0]

    # A batch is running when the timer fires: it is left to trim after itself.
    clock[0] += 1
    runtime.trim_later()
    baseline = runtime.reset_peak()
    clock[0] += 9
    timers.fire()
    assert trims == [60.0, 70.0]
    runtime.peak_above(baseline)
    assert runtime.after_batch()
    assert trims == [60.0, 70.0, 80.0]

    off = DeviceRuntime(torch.device("cpu"), trim_interval_s=0)
    off.trim_later()
    assert not timers.armed


# Allocates and frees the same mid-sized tensors over and over, as consecutive forward passes
# do, and prints the page faults per round (after a warm-up round), then the resident memory
# before and after one trim.
FAULTS_SCRIPT = """
import json, resource, sys
import torch
from service.engine.batching import allocator
from service.engine.batching.device import proc_status_bytes
retained = allocator.retain_freed_memory() if sys.argv[1] == "retain" else False

def one_round():
    kept = [torch.ones(4, 2048, 44) for _ in range(8)]  # ~1.4 MB each, as a feature map
    return float(sum(t.sum() for t in kept))

one_round()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    one_round()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
held = proc_status_bytes("VmRSS")
allocator.trim()
print(json.dumps({"retained": retained, "faults": faults, "trimmed": held - proc_status_bytes("VmRSS")}))
"""


def run_rounds(mode: str, **env: str) -> dict:
    """FAULTS_SCRIPT's figures with glibc's defaults (``default``) or retention (``retain``)."""
    return run_script(FAULTS_SCRIPT, [mode], allocator.MALLOPT_VARIABLES, **env)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_retained_memory_spares_each_forward_pass_its_page_faults() -> None:
    # The control: glibc without retention, its mmap threshold pinned at the value every process
    # starts with. Left dynamic, the threshold rises after the first free and whether the heap
    # top can then be trimmed depends on where small allocations landed, so the control's faults
    # varied from ~400 to ~2,800 per round between runs; pinned, every block is mapped and
    # unmapped each round, deterministically.
    default = run_rounds("default", MALLOC_MMAP_THRESHOLD_=str(128 * 1024))
    retained = run_rounds("retain")
    assert not default["retained"] and retained["retained"]
    assert default["faults"] > 500, f"the control did not fault ({default}): proves nothing"
    assert retained["faults"] < 0.05 * default["faults"], (default, retained)
    # What the heap keeps between rounds, the periodic trim still gives back.
    assert retained["trimmed"] > 4 * 2**20, retained


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_thresholds_in_the_environment_win() -> None:
    assert not run_rounds("retain", MALLOC_MMAP_THRESHOLD_="131072")["retained"]
