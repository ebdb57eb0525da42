"""A real English text corpus that ships with Python: the standard library's docstrings.

Used by the quality measurement (``models.text.quality``), its test, and the speed benchmark.
Docstrings of modules, classes and functions are read with ``ast`` (nothing is imported, so no
module side effects), whitespace-collapsed and de-duplicated. Test suites, IDLE, lib2to3 and
site-packages are left out. The selection is deterministic for a given Python version: texts are
ordered by SHA-1 of their content, never by chance.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import sysconfig
from pathlib import Path

# Left out: test suites, GUI and demo code, bundled third-party packages.
_TESTS_AND_DEMOS = ("test", "tests", "idlelib", "turtledemo", "lib2to3")
SKIP_DIRS = frozenset((*_TESTS_AND_DEMOS, "site-packages", "ensurepip"))
# Word-count bins: a few words (one-liners) up to docstrings far past 256 tokens.
WORD_BINS: tuple[tuple[int, int], ...] = ((1, 8), (9, 32), (33, 96), (97, 192), (193, 10**9))
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _stable_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def stdlib_docstrings() -> tuple[str, ...]:
    """Every distinct docstring in this interpreter's standard library, in SHA-1 order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if SKIP_DIRS & set(path.relative_to(root).parts[:-1]):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, _DOC_NODES) and (doc := ast.get_docstring(node)):
                docs.append(" ".join(doc.split()))
    return tuple(sorted(set(docs), key=_stable_key))


def length_spread(per_bin: int) -> list[str]:
    """Up to ``per_bin`` docstrings from each word-count bin of :data:`WORD_BINS`."""
    docs = stdlib_docstrings()
    out: list[str] = []
    for lo, hi in WORD_BINS:
        out.extend([d for d in docs if lo <= len(d.split()) <= hi][:per_bin])
    return out


def word_windows(count: int, words: int) -> list[str]:
    """``count`` texts of exactly ``words`` words, cut from the docstrings laid end to end."""
    stream = [w for doc in stdlib_docstrings() for w in doc.split()]
    if count * words > len(stream):
        raise ValueError(f"the corpus has {len(stream)} words, fewer than {count} x {words}")
    return [" ".join(stream[i * words : (i + 1) * words]) for i in range(count)]


def module_documents() -> list[tuple[str, list[str]]]:
    """Each standard-library module as one long document: its docstrings (module, classes,
    functions) in source order, whitespace-collapsed; modules ordered by SHA-1 of their name.
    Long-text retrieval (``benchmarks/long_text_retrieval.py``) cuts queries from them."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out: list[tuple[str, list[str]]] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if SKIP_DIRS & set(relative.parts[:-1]):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        nodes = sorted(
            (n for n in ast.walk(tree) if isinstance(n, _DOC_NODES)),
            key=lambda n: getattr(n, "lineno", 0),
        )
        docs = [" ".join(d.split()) for n in nodes if (d := ast.get_docstring(n))]
        if docs:
            out.append((".".join(relative.with_suffix("").parts), docs))
    return sorted(out, key=lambda item: _stable_key(item[0]))
