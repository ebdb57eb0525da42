"""A text model's measured quality (``quality.json``, written by ``attnserve evaluate``), shown on
its card (:meth:`models.text.base.TextModel.card`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.quality_file import read_quality

QUALITY_FILE = Path(__file__).with_name("quality.json")  # the shipped MiniLM's


def load_quality(path: Path = QUALITY_FILE) -> dict[str, Any]:
    """Measured quality per precision and backend (written by ``python -m models.text.quality.embedding``;
    :mod:`models.quality_file`); {} if absent."""
    return read_quality(path)
