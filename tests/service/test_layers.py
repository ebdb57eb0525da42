"""The layers, checked on the source. Issue 14: routes parse, make one engine call and render;
they import neither torch nor ``models``, and reach the models only through the engine. Issue 30:
``service/`` grouped by concern keeps one direction between its packages,

    cli -> runtime -> app, state -> http -> engine -> batching -> servables -> models

with settings, errors, lifecycle and observability shared below them all; nothing imports
upward."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"
ROUTES = SERVICE / "http" / "routes"
MODEL_ROUTES = ("encode.py", "embeddings.py", "forecast.py", "models.py")
# What every layer may import from service/: these import nothing from service/ themselves.
SHARED = ("settings.py", "errors.py", "lifecycle.py")
# The only modules that touch torch: the device runtime and the servable adapters.
TORCH_MODULES = ("engine/batching/device.py", "engine/servables/")
# The schemas' default quality budgets (a plain table of numbers, beside the quality.json reader
# it uses) and the names of backends and precisions (models/names.py, kept free of torch for
# exactly such importers).
HTTP_MODELS = {"models.quality_loss", "models.quality_file", "models.names"}
# Package -> what nothing in it may import (prefixes of dotted module names).
UPWARD = {
    "http": ("service.runtime", "service.app", "service.cli"),
    "engine": ("service.http", "service.runtime", "service.app", "service.state", "service.cli"),
    "engine/batching": (
        "service.engine.engine",
        "service.engine.registry",
        "service.engine.auto_attention",
    ),
    "engine/servables": (
        "service.engine.engine",
        "service.engine.registry",
        "service.engine.auto_attention",
        "service.engine.batching.batcher",
        "service.engine.batching.worker",
    ),
}


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def name_of(path: Path) -> str:
    return str(path.relative_to(SERVICE))


@pytest.mark.parametrize("path", modules(ROUTES), ids=lambda p: p.name)
def test_routes_import_neither_torch_nor_models(path: Path) -> None:
    for name in imported(path):
        assert name.split(".")[0] not in {"torch", "models"}, (path.name, name)
        if name.startswith("service.engine"):
            # The engine's one call, and the typed inputs it takes; never the batcher or registry.
            assert name in {"service.engine.engine", "service.engine.servables.base"}, (
                path.name,
                name,
            )


@pytest.mark.parametrize("path", modules(SERVICE / "http"), ids=name_of)
def test_http_imports_no_torch_and_no_model(path: Path) -> None:
    for name in imported(path):
        assert name.split(".")[0] != "torch", (name_of(path), name)
        assert name.split(".")[0] != "models" or name in HTTP_MODELS, (name_of(path), name)


@pytest.mark.parametrize("package", sorted(UPWARD))
def test_nothing_imports_upward(package: str) -> None:
    upward = [
        (name_of(path), name)
        for path in modules(SERVICE / package)
        for name in imported(path)
        if name.startswith(UPWARD[package])
    ]
    assert upward == []


@pytest.mark.parametrize("name", sorted(HTTP_MODELS))
def test_what_http_may_import_from_models_imports_nothing(name: str) -> None:
    """The ``models`` modules the HTTP layer may read import no torch and nothing else of
    ``models`` (which would bring torch along), only each other."""
    path = SERVICE.parent / (name.replace(".", "/") + ".py")
    heavy = [
        n
        for n in imported(path)
        if n.split(".")[0] == "torch" or (n.split(".")[0] == "models" and n not in HTTP_MODELS)
    ]
    assert heavy == []


@pytest.mark.parametrize("name", SHARED)
def test_shared_modules_import_nothing_from_service(name: str) -> None:
    assert [n for n in imported(SERVICE / name) if n.split(".")[0] == "service"] == []


def test_observability_imports_only_settings_from_service() -> None:
    for path in modules(SERVICE / "observability"):
        for name in imported(path):
            if name.split(".")[0] == "service":
                assert name.startswith(("service.observability", "service.settings")), (
                    name_of(path),
                    name,
                )


def test_only_the_cli_starts_a_runtime() -> None:
    """``service.runtime`` is the top floor: only the CLI (and runtime itself) imports it."""
    importers = [
        (name_of(path), name)
        for path in modules(SERVICE)
        if not name_of(path).startswith("runtime/") and name_of(path) != "cli.py"
        for name in imported(path)
        if name.startswith("service.runtime")
    ]
    assert importers == []


def test_only_the_device_runtime_and_the_servables_touch_torch() -> None:
    users = [
        name_of(path)
        for path in modules(SERVICE)
        if any(name.split(".")[0] == "torch" for name in imported(path))
    ]
    assert users
    assert [u for u in users if not u.startswith(TORCH_MODULES)] == []


def test_service_stays_grouped_in_small_files() -> None:
    """Issue 30: at most 12 entries at the top of ``service/``, no module over 400 lines."""
    top = [p for p in SERVICE.iterdir() if p.name != "__pycache__"]
    assert len(top) <= 12, sorted(p.name for p in top)
    long = {name_of(p): n for p in modules(SERVICE) if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


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
