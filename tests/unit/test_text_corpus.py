"""The stdlib-docstring corpus: the shipped snapshot is the one the measurements were made on, its
readers agree with each other, and the extraction that made it reads what its docstring says."""

from __future__ import annotations

import hashlib
from pathlib import Path

from models.text.quality.card import load_quality
from models.text.quality.corpus import (
    WORD_BINS,
    extract_module_documents,
    length_spread,
    load_snapshot,
    module_documents,
    stdlib_docstrings,
)

# What `.venv/bin/python -m models.text.quality.corpus --write ...` gave on CPython 3.11.7.
SNAPSHOT_PYTHON = "3.11.7"
SNAPSHOT_MODULES = 504
SNAPSHOT_DOCSTRINGS = 7333


def test_the_snapshot_is_the_corpus_of_the_measurements() -> None:
    snapshot = load_snapshot()
    assert snapshot["python"] == SNAPSHOT_PYTHON
    assert len(module_documents()) == SNAPSHOT_MODULES
    assert len(stdlib_docstrings()) == SNAPSHOT_DOCSTRINGS
    # quality.json names the Python whose docstrings it measured: the snapshot's.
    assert load_quality()["corpus"]["source"].startswith(f"Python {snapshot['python']} ")
    # PSF material: the licence travels with it.
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in snapshot["license"]


def test_the_readers_agree() -> None:
    docs = stdlib_docstrings()
    assert set(docs) == {d for _name, module_docs in module_documents() for d in module_docs}
    assert list(docs) == sorted(docs, key=lambda d: hashlib.sha1(d.encode()).hexdigest())
    names = [name for name, _docs in module_documents()]
    assert len(set(names)) == len(names)
    spread = length_spread(2)
    assert len(spread) == 2 * len(WORD_BINS)
    for i, (lo, hi) in enumerate(WORD_BINS):
        assert all(lo <= len(d.split()) <= hi for d in spread[2 * i : 2 * i + 2])


def test_extraction_reads_docstrings_in_source_order_and_skips_tests(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""The   package.\n\n   Second line."""\n')
    (tmp_path / "pkg" / "mod.py").write_text(
        '"""Module."""\n'
        "class C:\n"
        '    """Class."""\n'
        "    def m(self):\n"
        '        """Method."""\n'
        "async def f():\n"
        '    """Function."""\n'
    )
    (tmp_path / "plain.py").write_text("x = 1\n")  # no docstrings: no document
    (tmp_path / "broken.py").write_text('"""Never read."""\ndef (:\n')
    for skipped in ("test", "idlelib", "site-packages"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "x.py").write_text('"""Left out."""\n')
    documents = dict(extract_module_documents(tmp_path))
    assert documents == {
        "pkg.__init__": ["The package. Second line."],
        "pkg.mod": ["Module.", "Class.", "Method.", "Function."],
    }
