"""What every results file records about the machine it ran on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, as a string for a table's header."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cores() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def describe() -> str:
    """One line of host facts: CPU model, usable cores, torch and Python versions."""
    try:
        import torch

        torch_version = f", torch {torch.__version__}"
    except ImportError:  # the peers' client side runs without torch
        torch_version = ""
    # A run given priority over other work on a shared host (``nice -n -5 python -m ...``) says so.
    niceness = os.nice(0)
    nice = f", run at nice {niceness}" if niceness else ""
    return (
        f"{cpu_model()}, {cores()} cores{torch_version}, python {platform.python_version()}{nice}"
    )
