"""Run every benchmark script for a few seconds (``--smoke``) and fail on any error: CI's proof
that each still runs, without touching a measured result.

    python -m benchmarks.smoke [--groups service peers] [--only http_load run] [--timeout 600]

A script is every module of the groups (:data:`GROUPS`: every package under ``benchmarks/``
but the harness and the GPU check, which ``make gpu-check-dry`` runs) whose command line is
built with :func:`benchmarks.harness.cli.parse` (and so takes ``--smoke``): the apps and
in-process helpers the scripts start themselves run as part of those. Under ``--smoke`` a
script writes its results to a scratch folder (:func:`benchmarks.harness.report.smoke_mode`).

Scripts that need packages outside the dev extra run their own-server part only: the peer runs
(:mod:`benchmarks.peers.run`, both ``--task`` values) drop LitServe, infinity-emb,
the naive app and the sentence-transformers / ONNX Runtime reference rows when the peer
virtualenvs (``make peers-venv``) are missing, and measure attnserve alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Found, not listed: a new package of scripts is smoke-run with nothing else edited.
NOT_GROUPS = ("harness", "gpu_check")
GROUPS = tuple(
    sorted(
        init.parent.name
        for init in (ROOT / "benchmarks").glob("*/__init__.py")
        if init.parent.name not in NOT_GROUPS
    )
)
# Scripts whose options select different measurements: one smoke run per option set.
VARIANTS = {
    "benchmarks.peers.run": [[], ["--task", "rerank"]],
    "benchmarks.attention.informer_long": [[], ["--memory"]],
    "benchmarks.forecast.zero_shot": [
        [],
        ["--family", "chronos2"],
        ["--precisions", "float32,bfloat16"],
    ],
}


def scripts(groups: list[str]) -> list[str]:
    """The module names of every script in ``groups`` that takes ``--smoke``."""
    found = []
    for group in groups:
        for path in sorted((ROOT / "benchmarks" / group).glob("*.py")):
            text = path.read_text()
            if "cli.parse(" in text and '__name__ == "__main__"' in text:
                found.append(f"benchmarks.{group}.{path.stem}")
    return found


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--groups", nargs="+", default=list(GROUPS), choices=GROUPS)
    p.add_argument("--only", nargs="+", help="module names (last part) to run, e.g. http_load")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per script")
    args = p.parse_args(argv)
    modules = [m for m in scripts(args.groups) if not args.only or m.rsplit(".", 1)[1] in args.only]
    modules = [" ".join([m, *extra]) for m in modules for extra in VARIANTS.get(m, [[]])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    failed = []
    for module in modules:
        started = time.monotonic()
        print(f"--- {module} --smoke", flush=True)
        try:
            done = subprocess.run(
                [sys.executable, "-m", *module.split(), "--smoke"],
                cwd=ROOT,
                env=env,
                timeout=args.timeout,
            )
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        took = time.monotonic() - started
        print(f"--- {module}: {'ok' if ok else 'FAILED'} in {took:.0f} s", flush=True)
        if not ok:
            failed.append(module)
    print(f"{len(modules) - len(failed)} of {len(modules)} scripts ran under --smoke")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
