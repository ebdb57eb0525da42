"""A real English text corpus: the docstrings of Python 3.11.7's standard library, shipped here.

Used by the quality measurement (``models.text.quality.embedding``), its test, and the benchmarks. The
texts come from :data:`SNAPSHOT` (gzip JSON, package data), extracted once from CPython 3.11.7,
the interpreter the committed measurements (``models/text/quality/quality.json``, the floors in
``tests/unit/test_text_quality.py``) were made with. Reading the running interpreter's stdlib
instead would give another corpus on every Python version (3.12 and 3.13 differ), and with it
other texts, token counts and cosines.

The docstrings are Python Software Foundation material: the snapshot carries CPython's
``LICENSE.txt`` unchanged (its ``license`` field), as the PSF License Agreement asks of
derivative works.

Extraction, a maintainer command: it reads the stdlib of the interpreter that runs it (the
project's 3.11.7 virtualenv made the shipped file) and records that interpreter's version::

    .venv/bin/python -m models.text.quality.corpus --write models/text/quality/stdlib_docstrings.json.gz

Docstrings of modules, classes and functions are read with ``ast`` (nothing is imported, so no
module side effects) and whitespace-collapsed. Test suites, IDLE, lib2to3 and site-packages are
left out. Everything is deterministic: modules are ordered by SHA-1 of their name, texts by SHA-1
of their content, never by chance or by file-system order.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gzip
import hashlib
import json
import platform
import sysconfig
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("stdlib_docstrings.json.gz")
# Left out: test suites, GUI and demo code, bundled third-party packages.
_TESTS_AND_DEMOS = ("test", "tests", "idlelib", "turtledemo", "lib2to3")
SKIP_DIRS = frozenset((*_TESTS_AND_DEMOS, "site-packages", "ensurepip"))
# Word-count bins: a few words (one-liners) up to docstrings far past 256 tokens.
WORD_BINS: tuple[tuple[int, int], ...] = ((1, 8), (9, 32), (33, 96), (97, 192), (193, 10**9))
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _stable_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Readers: everything below reads the shipped snapshot, whatever Python runs it.


@functools.lru_cache(maxsize=1)
def load_snapshot(path: Path = SNAPSHOT) -> dict[str, Any]:
    """The snapshot file: ``python`` (the version it was extracted from), ``source``,
    ``license`` and ``modules`` (``[name, [docstring, ...]]`` pairs, as :func:`module_documents`)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def module_documents() -> list[tuple[str, list[str]]]:
    """Each standard-library module as one long document: its docstrings (module, classes,
    functions) in source order, whitespace-collapsed; modules ordered by SHA-1 of their name.
    Long-text retrieval (``benchmarks/text/long_text_retrieval.py``) cuts queries from them."""
    return [(name, list(docs)) for name, docs in load_snapshot()["modules"]]


@functools.lru_cache(maxsize=1)
def stdlib_docstrings() -> tuple[str, ...]:
    """Every distinct docstring of the snapshot, in SHA-1 order."""
    docs = {doc for _name, module_docs in load_snapshot()["modules"] for doc in module_docs}
    return tuple(sorted(docs, key=_stable_key))


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


# ---------------------------------------------------------------------------------------------
# Extraction: the maintainer command that made the snapshot (reads the running interpreter).


def extract_module_documents(root: Path | None = None) -> list[tuple[str, list[str]]]:
    """:func:`module_documents`, read from the standard library at ``root`` (default: the
    running interpreter's) instead of the snapshot."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
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


def write_snapshot(path: Path) -> dict[str, Any]:
    """Extract this interpreter's stdlib docstrings into ``path`` (byte-identical on re-runs:
    no timestamp in the gzip header)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    data = {
        "python": platform.python_version(),
        "source": f"{platform.python_implementation()} {platform.python_version()} standard "
        "library: docstrings of modules, classes and functions, whitespace-collapsed "
        f"(folders left out: {', '.join(sorted(SKIP_DIRS))})",
        "license": (root / "LICENSE.txt").read_text(encoding="utf-8"),
        "modules": extract_module_documents(root),
    }
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the stdlib-docstring corpus snapshot.")
    parser.add_argument(
        "--write",
        type=Path,
        required=True,
        metavar="PATH",
        help=f"output file (the shipped one: {SNAPSHOT.name} next to this module)",
    )
    args = parser.parse_args(argv)
    data = write_snapshot(args.write)
    texts = len({d for _name, docs in data["modules"] for d in docs})
    print(
        f"{args.write}: Python {data['python']}, {len(data['modules'])} modules, "
        f"{texts} distinct docstrings, {args.write.stat().st_size} bytes"
    )


if __name__ == "__main__":
    main()
