"""The layering issue 14 asks for, checked on the source: routes parse, make one engine call and
render; they import neither torch nor ``models``, and reach the models only through the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROUTES = Path(__file__).resolve().parents[2] / "service" / "http" / "routes"
MODEL_ROUTES = ("encode.py", "embeddings.py", "forecast.py", "models.py")


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(ROUTES.glob("*.py")), ids=lambda p: p.name)
def test_routes_import_neither_torch_nor_models(path: Path) -> None:
    for name in imported(path):
        assert name.split(".")[0] not in {"torch", "models"}, (path.name, name)
        assert not name.startswith(("service.engine.batching", "service.engine.registry")), (
            path.name,
            name,
        )


@pytest.mark.parametrize("name", MODEL_ROUTES)
def test_each_model_route_makes_one_engine_call(name: str) -> None:
    tree = ast.parse((ROUTES / name).read_text())
    handlers = [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]
    assert handlers
    for handler in handlers:
        calls = [
            n.func.attr
            for n in ast.walk(handler)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "engine"
        ]
        assert len(calls) == 1, (name, handler.name, calls)
