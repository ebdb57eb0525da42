"""``models/names.py`` reads and parses the backend files once per process: later calls (the
settings, the registry, tools that list backends) reuse the first answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from models import names
from models.names import BACKEND_NAMES, discover_backends


def test_a_second_discovery_reads_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, order in (("one", 1), ("two", 2)):
        (tmp_path / f"{name}.py").write_text(
            f'BACKEND = Backend(name="{name}", order={order}, exact=True)\n'
        )
    read: list[Path] = []
    declared = names._declared

    def counting(path: Path) -> tuple[str, int] | None:
        read.append(path)
        return declared(path)

    monkeypatch.setattr(names, "_declared", counting)
    assert discover_backends(tmp_path) == ("one", "two")
    assert len(read) == 2
    assert discover_backends(tmp_path) == ("one", "two")
    (tmp_path / "sub").mkdir()
    assert discover_backends(tmp_path / "sub" / "..") == ("one", "two")  # the same, spelt anew
    assert len(read) == 2
    # The module's own listing, made at import, is the cached answer for the default folder.
    assert discover_backends() == BACKEND_NAMES
    assert len(read) == 2
