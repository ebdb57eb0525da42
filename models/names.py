"""Names that code which must not import torch needs: the server's settings and its supervisor
process (``service/runtime/workers.py``), which loads no model, and the request schemas.

The backend names are read from the backend files themselves, parsed with :mod:`ast` (nothing
is imported, so no torch): a backend is a file ``models/attention/<name>.py`` holding a
module-level ``BACKEND = Backend(name="<name>", order=<int>, ...)`` (see
:mod:`models.attention.base`). The registry imports exactly the modules listed here.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ATTENTION_DIR = Path(__file__).resolve().parent / "attention"


def _keyword(call: ast.Call, keyword: str, path: Path) -> object:
    """The literal value of ``keyword=`` in ``call``; ValueError if absent or not a literal."""
    for item in call.keywords:
        if item.arg == keyword and isinstance(item.value, ast.Constant):
            return item.value.value
    raise ValueError(f"{path}: BACKEND = Backend(...) needs a literal {keyword}=")


def _declared(path: Path) -> tuple[str, int] | None:
    """``(name, order)`` of the module-level ``BACKEND = Backend(...)`` in ``path``, if any."""
    text = path.read_text(encoding="utf-8")
    if not re.search(r"^BACKEND\b", text, re.MULTILINE):
        return None  # parse only the files that may declare one (settings import this module)
    for node in ast.parse(text, filename=str(path)).body:
        target: ast.expr
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == "BACKEND"):
            continue
        if not (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "Backend"
        ):
            raise ValueError(f"{path}: BACKEND must be assigned a Backend(...) call")
        name, order = _keyword(value, "name", path), _keyword(value, "order", path)
        if not isinstance(name, str) or type(order) is not int:
            raise ValueError(f"{path}: Backend's name= must be a string and order= an integer")
        if name != path.stem:
            raise ValueError(f"{path}: backend name {name!r} must be the file's name {path.stem!r}")
        return name, order
    return None


def discover_backends(folder: Path = ATTENTION_DIR) -> tuple[str, ...]:
    """The backends declared in ``folder/*.py``, by ascending ``order``; each folder's files
    are read and parsed once per process (the registry imports its backends once at start, so
    a backend file added later needs a restart anyway).

    Raises:
        ValueError: a ``BACKEND`` that is not ``Backend(name=<literal>, order=<literal>, ...)``,
            a name other than its file's, or two backends with one ``order``.
    """
    return _discover(folder.resolve())


@functools.cache
def _discover(folder: Path) -> tuple[str, ...]:
    found = [d for path in sorted(folder.glob("*.py")) if (d := _declared(path)) is not None]
    found.sort(key=lambda declared: declared[1])
    orders = [order for _, order in found]
    if len(set(orders)) != len(orders):
        raise ValueError(f"backends in {folder} share an order: {found}")
    return tuple(name for name, _ in found)


# full, flash, probsparse, performer, nystrom, ...: every listing (tables, quality files) uses
# this order. models.attention.BACKENDS (the registry's own names) equals it; a test checks it.
BACKEND_NAMES: tuple[str, ...] = discover_backends()

# Batch sizes a compiled forecast batch is padded up to (see models/compile.py).
DEFAULT_BATCH_BUCKETS: tuple[int, ...] = (1, 4, 16, 32)

# The sentence encoder's name, and what clients may also call it (its sentence-transformers id).
TEXT_MODEL = "all-MiniLM-L6-v2"
TEXT_ALIASES: tuple[str, ...] = ("sentence-transformers/all-MiniLM-L6-v2",)

# What the server loads when its settings name no models: the encoder and the shipped Informers.
DEFAULT_MODELS: tuple[str, ...] = (
    TEXT_MODEL,
    "informer-etth1-h24",
    "informer-etth1-h48",
    "informer-etth1-h168",
    "informer-etth1-h336",
    "informer-etth1-h720",
    "informer-ettm1-h96-c2048",
    "informer-ettm1-h288-c2048",
)

# Numeric precisions a model may be loaded in (models/precision.py). float32 first: the default,
# and the one every exactness contract is stated for.
PRECISION_NAMES: tuple[str, ...] = ("float32", "bfloat16", "int8", "float16")
DEFAULT_PRECISION = "float32"
