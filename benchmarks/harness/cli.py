"""Shared command-line options: one parent parser per option the scripts have in common, and
``--smoke`` on every script.

    p = cli.parser(__doc__, cli.threads(1), cli.repeats(5), cli.out(RESULTS / "x.md"))
    args = cli.parse(p, argv, repeats=1, lengths=[64])   # the values --smoke runs with

``--smoke`` runs a script for a few seconds with tiny sizes (the overrides given to
:func:`parse`) and sends whatever it writes for ``benchmarks/results/`` to a scratch folder
(:func:`benchmarks.harness.report.smoke_mode`): CI proves each script still runs without
touching a measured result.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import report


def _option(flag: str, **kwargs: Any) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(flag, **kwargs)
    return parent


def threads(default: int | None = 1, help: str = "torch threads") -> argparse.ArgumentParser:
    """``--threads N`` (one count)."""
    return _option("--threads", type=int, default=default, help=help)


def repeats(default: int, help: str = "timed repeats per measurement") -> argparse.ArgumentParser:
    """``--repeats N``."""
    return _option("--repeats", type=int, default=default, help=help)


def rounds(
    default: int, help: str = "rounds, the variants alternating within each"
) -> argparse.ArgumentParser:
    """``--rounds N``."""
    return _option("--rounds", type=int, default=default, help=help)


def seconds(default: float, help: str = "time budget per measurement") -> argparse.ArgumentParser:
    """``--seconds S``."""
    return _option("--seconds", type=float, default=default, help=help)


def out(default: Path | None, help: str = "the results file to write") -> argparse.ArgumentParser:
    """``--out PATH``."""
    return _option("--out", type=Path, default=default, help=help)


def names(
    flag: str,
    default: Sequence[str],
    help: str | None = None,
    choices: Sequence[str] | None = None,
) -> argparse.ArgumentParser:
    """A list of names (``--backends``, ``--models``, ...), from ``choices`` when given."""
    return _option(flag, nargs="+", default=list(default), help=help, choices=choices)


def sizes(flag: str, default: Sequence[int], help: str | None = None) -> argparse.ArgumentParser:
    """A list of integers (``--lengths``, ``--contexts``, ...)."""
    return _option(flag, type=int, nargs="+", default=list(default), help=help)


def parser(doc: str | None, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A script's parser: its docstring as help, the shared ``parents`` and ``--smoke``."""
    p = argparse.ArgumentParser(
        description=doc, parents=list(parents), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="run for a few seconds with tiny sizes; write nothing under benchmarks/results/",
    )
    return p


def parse(
    p: argparse.ArgumentParser, argv: Sequence[str] | None = None, **smoke: Any
) -> argparse.Namespace:
    """Parse ``argv``; under ``--smoke`` replace the given options by the ``smoke`` values and
    turn on the report writer's smoke mode."""
    args = p.parse_args(argv)
    if args.smoke:
        unknown = set(smoke) - set(vars(args))
        if unknown:
            raise ValueError(f"smoke values for options the parser lacks: {sorted(unknown)}")
        vars(args).update(smoke)
        report.smoke_mode()
    return args
