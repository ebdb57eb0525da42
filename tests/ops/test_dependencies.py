"""Every third-party module that ``service/`` and ``models/`` import is a declared runtime
dependency in pyproject.toml: the Docker image installs only those, so a module that arrives
only through the dev extras (as pandas once did) would pass the tests and crash the container."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"service", "models"}


def imported_modules(package: Path) -> set[str]:
    """Top-level names of absolute imports anywhere in ``package``."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        normalise(re.split(r"[\[<>=!~ ;]", req, maxsplit=1)[0]) for req in project["dependencies"]
    }


def test_runtime_imports_are_declared_dependencies() -> None:
    third_party = {
        name
        for pkg in LOCAL
        for name in imported_modules(ROOT / pkg)
        if name not in sys.stdlib_module_names and name not in LOCAL and name != "__future__"
    }
    assert {"torch", "fastapi"} <= third_party  # the scan sees real imports
    distributions = packages_distributions()
    declared = declared_dependencies()
    undeclared = {}
    for name in sorted(third_party):
        dists = {normalise(d) for d in distributions.get(name, [name])}
        if not dists & declared:
            undeclared[name] = sorted(dists)
    assert not undeclared, (
        f"imported by service/ or models/ but not in [project.dependencies]: {undeclared}"
    )
