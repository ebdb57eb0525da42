"""What every results table records about the machine it ran on."""

from __future__ import annotations

import os
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
