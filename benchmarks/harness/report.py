"""One writer for every results file: the metadata header (the command that regenerates the file,
host facts, date, load average), Markdown tables, JSON and plots.

In smoke mode (``--smoke``, see :mod:`benchmarks.harness.cli`) every file meant for
``benchmarks/results/`` goes to a scratch folder instead, so a smoke run never overwrites a
measured result.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness.host import describe, load_average

RESULTS = Path(__file__).resolve().parents[1] / "results"
SMOKE_RESULTS = Path(tempfile.gettempdir()) / "attnserve-benchmarks-smoke"
_smoke = False


def smoke_mode(on: bool = True) -> None:
    """Send every later write meant for ``benchmarks/results/`` to :data:`SMOKE_RESULTS`."""
    global _smoke
    _smoke = on


def destination(path: Path) -> Path:
    """Where a write to ``path`` lands: ``path`` itself, or its scratch twin in smoke mode."""
    path = Path(path)
    if _smoke and path.resolve().is_relative_to(RESULTS):
        return SMOKE_RESULTS / path.resolve().relative_to(RESULTS)
    return path


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """The command that regenerates a results file: ``python -m <module> <argv>``, with paths
    inside this checkout written relative to it (a reader's checkout lies elsewhere)."""
    root = f"{Path(__file__).resolve().parents[2]}/"
    given = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", "-m", module, *(a.replace(root, "") for a in given)])


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A Markdown table. ``align`` has one letter per column, ``l`` or ``r`` (missing: ``l``);
    cells are written with ``str``, so format numbers before passing them."""
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(columns), "l"))
    lines = ["| " + " | ".join(columns) + " |", rule]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (or its smoke twin), creating folders; return where it went."""
    path = destination(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as indented JSON (see :func:`write`)."""
    return write(path, json.dumps(data, indent=2) + "\n")


@contextmanager
def figure(path: Path, ncols: int = 1, size: tuple[float, float] = (7, 4.5)) -> Iterator[Any]:
    """Yield ``ncols`` matplotlib axes (a list) and save the figure to ``path`` (or its smoke
    twin) afterwards; without matplotlib, say so and yield axes that draw nothing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install 'attnserve[bench]'): no {path.name}")
        yield [_Nothing() for _ in range(ncols)]
        return
    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    yield list(axes[0])
    fig.tight_layout()
    path = destination(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


class _Nothing:
    """Stands in for an axis when matplotlib is missing: every attribute and call is a no-op."""

    def __getattr__(self, name: str) -> _Nothing:
        return self

    def __call__(self, *args: object, **kwargs: object) -> _Nothing:
        return self


def log_axes(ax: Any, xlabel: str, ylabel: str, base: int = 2) -> None:
    """The usual latency/memory-vs-length axes: log x (base ``base``), log y, grid, legend."""
    ax.set_xscale("log", base=base)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


class Report:
    """A results file in the making: the metadata header, then the sections added in order.

    Created when the measurement starts (the load average before it is recorded then); the
    header is written when the file is, with the load average after.
    """

    def __init__(self, module: str, argv: Sequence[str] | None = None) -> None:
        self.command = command(module, argv)
        self.started = datetime.now(UTC)
        self.load_before = load_average()
        self.sections: list[str] = []

    def header(self) -> str:
        """Command, host, date and load average before/after, as one paragraph."""
        return (
            f"Command: `{self.command}`; {describe()}; {self.started:%Y-%m-%d %H:%M} UTC; "
            f"load average before {self.load_before}, after {load_average()} (1, 5, 15 min)."
        )

    def add(self, *sections: str) -> Report:
        """Append Markdown sections (paragraphs, tables), each separated by a blank line."""
        self.sections += [s.strip("\n") for s in sections]
        return self

    def table(
        self, columns: Sequence[str], rows: Iterable[Sequence[object]], align: str = ""
    ) -> Report:
        """Append a Markdown table (see :func:`table`)."""
        return self.add(table(columns, rows, align))

    def text(self, title: str | None = None) -> str:
        """The whole file: an optional ``# title``, the header, the sections."""
        head = [f"# {title}"] if title else []
        return "\n\n".join([*head, self.header(), *self.sections]) + "\n"

    def write(self, path: Path | None, title: str | None = None, data: Any = None) -> str:
        """Print the Markdown and write it to ``path`` (none: print only) and, given ``data``,
        the JSON beside it (same name, ``.json``, as given: its shape is the script's)."""
        text = self.text(title)
        print(text)
        if path is not None:
            print(f"wrote {write(path, text)}")
            if data is not None:
                write_json(Path(path).with_suffix(".json"), data)
        return text
