"""The GPU check: one command for a short, bare, offline GPU machine, one report.

    python -m benchmarks.gpu_check --out OUT          # on the GPU machine (make gpu-check OUT=...)
    python -m benchmarks.gpu_check --out OUT --dry    # here, on CPU (make gpu-check-dry)

Steps, each in its own process under its own time limit (:data:`LIMITS`, 480 s together; the
whole run also stops at ``--budget-s``), so one slow step cannot eat the others' time:

1. **install**: the wheels ``make gpu-wheels`` put in ``.gpu-wheels/`` go into a scratch folder
   with ``pip --no-index --no-deps --target`` (the machine's torch and CUDA untouched), which
   goes on ``PYTHONPATH`` before the checkout for every later step;
2. **environment**: device, driver, torch/CUDA, packages (:mod:`.environment`);
3. **tests**: ``pytest tests/gpu`` with a per-test timeout, counts from its JUnit XML;
4. **attention**: every backend at FlashAttention-2's shapes beside its published figures
   (:mod:`.kernels`);
5. **service**: ``attnserve serve`` on the device under load, then ``/metrics`` (:mod:`.serve`).

``OUT`` receives ``report.md`` and ``report.json`` (rewritten after every step), ``gpu-check.log``
(every step's output) and ``server.log``: four files, within what the run tool brings back.
``--dry`` runs the same steps on the CPU: install only lists the wheels, the attention rows say
``skipped: no CUDA``, the service runs a tiny encoder for seconds. The exit status is 1 when a
step failed or the report misses part of its shape.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.gpu_check import report as shape
from benchmarks.gpu_check.wheels import DEST, budget
from benchmarks.harness.host import describe

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {"install": 45.0, "environment": 45.0, "tests": 120.0, "attention": 120.0,
          "service": 150.0}  # fmt: skip
TERM_GRACE_S = 15.0  # after SIGTERM at a step's limit (the service step stops its server)


class Runner:
    """Runs the steps in order, each in a process of its own, and keeps the report current."""

    def __init__(self, out: Path, dry: bool, wheels: Path, budget_s: float, argv: list[str]):
        self.out, self.dry, self.wheels = out, dry, wheels
        self.deadline = time.monotonic() + budget_s
        self.started = time.monotonic()
        self.scratch = Path(tempfile.mkdtemp(prefix="attnserve-gpu-check-"))
        self.log = out / "gpu-check.log"
        self.path = [str(ROOT)]  # PYTHONPATH of the steps; install puts its folder first
        self.report: dict[str, Any] = {
            "mode": "dry run (CPU)" if dry else "GPU",
            "command": shlex.join(["python", "-m", "benchmarks.gpu_check", *argv]),
            "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
            "host": describe(),
            "budget_s": budget_s,
            "total_s": 0.0,
            "steps": {},
        }

    def limit(self, name: str) -> float:
        """The step's limit, cut to what is left of the run's budget."""
        return max(0.0, min(LIMITS[name], self.deadline - time.monotonic()))

    def env(self) -> dict[str, str]:
        """The steps' environment: the carried packages and the checkout importable, offline."""
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(self.path),
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }

    def process(self, command: list[str], limit: float) -> tuple[int | None, float]:
        """Run ``command`` in its own session, output appended to the log; (exit status or
        ``None`` past ``limit``, seconds)."""
        started = time.monotonic()
        with self.log.open("a") as log:
            log.write(f"\n$ {shlex.join(command)}\n")
            log.flush()
            proc = subprocess.Popen(
                command, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                code: int | None = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                code = None
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        return code, time.monotonic() - started

    def record(self, name: str, status: str, seconds: float, message: str, figures: dict) -> None:
        """Add the step to the report and rewrite the report files."""
        self.report["steps"][name] = shape.step_record(
            name, status, seconds, LIMITS[name], message, figures
        )
        self.report["total_s"] = round(time.monotonic() - self.started, 1)
        shape.write(self.out, self.report)
        print(f"--- {name}: {status} in {seconds:.1f} s", flush=True)

    def module_step(self, name: str, module: str, *args: str) -> None:
        """A step that is a module of this package writing its result file."""
        result = self.scratch / f"{name}.json"
        limit = self.limit(name)
        if limit <= 0:
            self.record(name, "skipped: run budget spent", 0.0, "", {})
            return
        code, seconds = self.process(
            [sys.executable, "-m", module, "--result", str(result), *args], limit
        )
        data = json.loads(result.read_text()) if result.is_file() else {}
        status = data.get("status", "failed")
        if code is None:
            status = f"timed out after {limit:.0f} s"
        elif code != 0 and not status.startswith(("failed", "skipped")):
            status = "failed"
        message = data.get("message", "") or (
            "" if code == 0 else f"exit {code}; see gpu-check.log"
        )
        self.record(name, status, seconds, message, data.get("figures", {}))

    def install(self) -> None:
        """Step 1: the carried wheels into a scratch folder put first on ``PYTHONPATH``."""
        wheels = sorted(self.wheels.glob("*.whl"))
        figures: dict[str, Any] = {
            "wheels": [w.name for w in wheels],
            "wheel_bytes": sum(w.stat().st_size for w in wheels),
            "budget_bytes": budget(),
            "target": None,
        }
        if self.dry:
            self.record(
                "install", "skipped: dry run (this environment's packages)", 0.0, "", figures
            )
            return
        if not wheels:
            why = f"no wheels in {self.wheels.name}/ (run `make gpu-wheels` and carry it)"
            self.record("install", f"skipped: {why}", 0.0, "", figures)
            return
        target = self.scratch / "site"
        code, seconds = self.process(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
             "--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--target",
             str(target), *map(str, wheels)],
            self.limit("install"),
        )  # fmt: skip
        if code == 0:
            self.path.insert(0, str(target))
            figures["target"] = str(target)
        status = "ok" if code == 0 else ("timed out" if code is None else "failed")
        self.record("install", status, seconds, "" if code == 0 else "see gpu-check.log", figures)

    def tests(self) -> None:
        """Step 3: ``pytest tests/gpu``, counted from its JUnit XML."""
        limit = self.limit("tests")
        xml = self.scratch / "junit.xml"
        per_test = ["--timeout", "60"] if _has("pytest_timeout") else []
        code, seconds = self.process(
            [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-p", "no:cacheprovider",
             f"--junitxml={xml}", *per_test],
            limit,
        )  # fmt: skip
        figures = junit(xml) if xml.is_file() else {}
        if code is None:
            status = f"timed out after {limit:.0f} s"
        elif code in (0, 5) and not figures.get("failed") and not figures.get("errors"):
            status = "ok"  # 5: nothing collected ran (every test skipped counts as ran)
        else:
            status = "failed"
        message = "" if per_test else "pytest-timeout missing: no per-test limit"
        self.record("tests", status, seconds, message, figures)

    def run(self) -> dict[str, Any]:
        """Every step in order; the finished report."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.log.write_text("")
        dry = ["--dry"] if self.dry else []
        try:
            self.install()
            self.module_step("environment", "benchmarks.gpu_check.environment")
            self.tests()
            # Inside each step's limit: torch's import and CUDA's start for the grid, the
            # encoder's build and the load windows after the server is ready.
            self.module_step(
                "attention", "benchmarks.gpu_check.kernels",
                "--seconds", f"{max(1.0, self.limit('attention') - 20):.0f}", *dry,
            )  # fmt: skip
            self.module_step(
                "service", "benchmarks.gpu_check.serve", "--log", str(self.out / "server.log"),
                "--ready-s", f"{max(1.0, self.limit('service') - 60):.0f}", *dry,
            )  # fmt: skip
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return self.report


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def junit(xml: Path) -> dict[str, Any]:
    """Counts, failures (test, first line of the message) and skip reasons from a JUnit file."""
    counts: Counter[str] = Counter()
    failures: list[tuple[str, str]] = []
    skips: Counter[str] = Counter()
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
            continue
        text = (outcome.get("message") or outcome.text or "").strip().splitlines()
        first = text[0][:200] if text else ""
        if outcome.tag == "skipped":
            counts["skipped"] += 1
            skips[first] += 1
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            failures.append((test, first))
    return {
        "passed": counts["passed"],
        "failed": counts["failed"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "failures": failures,
        "skip_reasons": dict(skips),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the check; exit 1 when a step failed or the report misses part of its shape."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the report and logs")
    p.add_argument("--dry", action="store_true", help="on CPU: no CUDA steps, tiny service run")
    p.add_argument("--wheels", type=Path, default=DEST, help="the carried wheels")
    p.add_argument("--budget-s", type=float, default=sum(LIMITS.values()))
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    report = Runner(args.out.resolve(), args.dry, args.wheels, args.budget_s, argv).run()
    missing = shape.problems(report)
    bad = shape.failed(report)
    print(f"report: {args.out / 'report.md'}")
    if missing or bad:
        raise SystemExit(f"failed steps: {bad}; report shape: {missing}")


if __name__ == "__main__":
    main()
