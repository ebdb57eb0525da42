"""The GPU check's environment step: the device, driver, torch and CUDA, and every package the
project and the check use, each with its version and whether it lies in pyproject.toml's range.

    python -m benchmarks.gpu_check.environment --result env.json

Run in its own process by the runner (:mod:`benchmarks.gpu_check`), with the carried wheels on
its path, so it sees what the later steps will see.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from benchmarks.gpu_check.report import save_result

ROOT = Path(__file__).resolve().parents[2]
# Beside the project's own dependencies: what the check, the tests and the random-weight
# encoder use on the device machine.
ALSO = ("transformers", "sentence-transformers", "pytest", "pytest-timeout", "httpx", "onnxruntime")


def requirements() -> dict[str, str]:
    """pyproject.toml's runtime dependencies and the ``transformers`` extra: name -> specifier
    (``""`` for :data:`ALSO` names it does not constrain)."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["transformers"]]
    out = {}
    for text in listed:
        req = Requirement(text)
        out[req.name.lower()] = str(req.specifier)
    for name in ALSO:
        out.setdefault(name, "")
    return out


def packages() -> dict[str, dict[str, Any]]:
    """Each package's installed version (``None``: missing) and whether it meets its range."""
    from packaging.specifiers import SpecifierSet

    out: dict[str, dict[str, Any]] = {}
    for name, spec in requirements().items():
        try:
            version: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        in_range = version is not None and SpecifierSet(spec).contains(version, prereleases=True)
        out[name] = {"version": version, "range": spec, "in_range": in_range}
    return out


def driver() -> str | None:
    """The NVIDIA driver's version from ``nvidia-smi`` (``None`` without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi failed: {exc}"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None


def device() -> dict[str, Any]:
    """The CUDA device torch sees (``{"name": "cpu"}`` without one)."""
    import torch

    if not torch.cuda.is_available():
        return {"name": "cpu (no CUDA device)"}
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "memory_gib": props.total_memory / 2**30,
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "bf16": torch.cuda.is_bf16_supported(),
    }


def service_import() -> str:
    """``ok`` when the server's app imports (FastAPI, pydantic-settings, uvicorn and our code),
    else the error, so a missing package reads as one line and not a traceback later."""
    try:
        import uvicorn  # noqa: F401

        import service.app  # noqa: F401
    except Exception as exc:  # any import-time failure is the finding
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def main(argv: list[str] | None = None) -> None:
    """Write the environment step's result file."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--result", type=Path, required=True)
    args = p.parse_args(argv)
    import torch

    figures = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device(),
        "driver": driver(),
        "packages": packages(),
        "service_import": service_import(),
    }
    status = "ok" if figures["service_import"] == "ok" else "failed"
    save_result(args.result, status, figures)


if __name__ == "__main__":
    main()
