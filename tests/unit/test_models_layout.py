"""Issue 30: ``models/`` keeps training apart from the networks and stays in small files. The
serving path (``service/`` and every model package but ``models/training``) imports nothing from
``models.training``; no module in ``models/`` is over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
TRAINING = MODELS / "training"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:  # the module and each name in it
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
            names.add(node.module)
    return names


def serving_modules() -> list[Path]:
    service = sorted((ROOT / "service").rglob("*.py"))
    models = [p for p in sorted(MODELS.rglob("*.py")) if TRAINING not in p.parents]
    return service + models


def test_the_serving_path_imports_no_training_code() -> None:
    importers = [
        (str(path.relative_to(ROOT)), name)
        for path in serving_modules()
        for name in imported(path)
        if name == "models.training" or name.startswith("models.training.")
    ]
    assert importers == []


def test_models_stay_in_small_files() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted(MODELS.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}
