"""No import circles among the modules of ``models/`` and ``service/`` (issue 44).

Every ``import`` and ``from ... import`` counts, at module level or inside a function: a circle
closed by a function-level import still ties two modules into one unit that cannot be read,
tested or split apart alone. The graph is read from the source with ``ast`` (nothing is
imported), so the test also guards code paths the other tests never execute.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "service")


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under :data:`PACKAGES`."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports: ``import a.b`` gives ``a.b``; ``from a import b``
    gives ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (itself excluded)."""
    modules = project_modules()
    return {
        module: {name for name in imported_names(module, path) if name in modules} - {module}
        for module, path in modules.items()
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def one_circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, through the component:
    the circle a failure names (``a -> b -> a``)."""
    start, inside = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node] & inside):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    raise AssertionError(f"{component} is not a circle")  # a component always holds one


def test_the_graph_sees_the_project() -> None:
    """The walk finds the modules and their imports (an empty graph would pass vacuously)."""
    graph = import_graph()
    assert "models.attention.registry" in graph and "service.app" in graph
    assert "models.attention.base" in graph["models.attention.registry"]


def test_a_circle_is_found_and_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    (component,) = strongly_connected(graph)
    assert component == ["a", "b", "c"]
    assert one_circle(graph, component) == ["a", "b", "c", "a"]


def test_no_import_circles_in_models_and_service() -> None:
    graph = import_graph()
    circles = []
    for component in strongly_connected(graph):
        circle = one_circle(graph, component)
        more = len(component) > len(circle) - 1  # other modules tied in by further circles
        circles.append(
            " -> ".join(circle) + (f" (all tied: {', '.join(component)})" if more else "")
        )
    assert not circles, "import circles (each module imports the next):\n" + "\n".join(circles)
