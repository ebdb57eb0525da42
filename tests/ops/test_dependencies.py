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
# Modules that only run with an optional extra installed (the CLI checks for it first), and that
# extra's name in [project.optional-dependencies]; nothing else may import its packages.
OPTIONAL_MODULES = {
    ROOT / "service" / "runtime" / "ray_serve.py": "ray",
    ROOT / "service" / "runtime" / "ray_metrics.py": "ray",
    # transformers' own time-series classes: loaded only for such a folder (the registry names
    # the extra when it is missing).
    ROOT / "models" / "hf_forecast" / "bridge.py": "transformers",
    ROOT / "models" / "hf_forecast" / "forecaster.py": "transformers",
    ROOT / "models" / "training" / "patchtst_train.py": "transformers",
    # Text models on a transformers backbone (LLM embedders, causal-LM rerankers): imported only
    # when such a folder loads, and the refusal names the extra when it is missing.
    ROOT / "models" / "hf_text" / "config.py": "transformers",
    ROOT / "models" / "text" / "tokens" / "chat_pairs.py": "transformers",
    # Zero-shot forecasters: TimesFM 2.5 is a transformers class, Chronos-2 the chronos package's;
    # each is imported only when such a folder loads (models/zero_shot/folder.py names the extra).
    ROOT / "models" / "zero_shot" / "timesfm.py": "transformers",
    ROOT / "models" / "zero_shot" / "chronos2.py": "chronos",
    ROOT / "models" / "zero_shot" / "chronos2_inputs.py": "chronos",
}


def imported_modules(package: Path) -> set[str]:
    """Top-level names of absolute imports anywhere in ``package`` (a folder or one file),
    optional modules left out of folders."""
    names: set[str] = set()
    paths = [package] if package.is_file() else sorted(package.rglob("*.py"))
    for path in paths:
        if package.is_dir() and path in OPTIONAL_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_dependencies(extra: str | None = None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return {normalise(re.split(r"[\[<>=!~ ;]", req, maxsplit=1)[0]) for req in requirements}


def third_party(modules: set[str]) -> set[str]:
    return {
        name
        for name in modules
        if name not in sys.stdlib_module_names and name not in LOCAL and name != "__future__"
    }


def undeclared_imports(names: set[str], declared: set[str]) -> dict[str, list[str]]:
    distributions = packages_distributions()
    undeclared = {}
    for name in sorted(names):
        dists = {normalise(d) for d in distributions.get(name, [name])}
        if not dists & declared:
            undeclared[name] = sorted(dists)
    return undeclared


def test_optional_modules_import_only_their_extra() -> None:
    for module, extra in OPTIONAL_MODULES.items():
        names = third_party(imported_modules(module))
        assert extra in names  # the scan sees the extra's import
        undeclared = undeclared_imports(
            names, declared_dependencies() | declared_dependencies(extra)
        )
        assert not undeclared, f"{module.name} imports packages outside [{extra}]: {undeclared}"


def test_runtime_imports_are_declared_dependencies() -> None:
    names = third_party({name for pkg in LOCAL for name in imported_modules(ROOT / pkg)})
    assert {"torch", "fastapi"} <= names  # the scan sees real imports
    assert not names & set(OPTIONAL_MODULES.values())  # only the optional modules use extras
    undeclared = undeclared_imports(names, declared_dependencies())
    assert not undeclared, (
        f"imported by service/ or models/ but not in [project.dependencies]: {undeclared}"
    )
