"""A text model's measured quality (``quality.json``, written by ``attnserve evaluate``), shown on
its card (:meth:`models.text.base.TextModel.card`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

QUALITY_FILE = Path(__file__).with_name("quality.json")  # the shipped MiniLM's


def load_quality(path: Path = QUALITY_FILE) -> dict[str, Any]:
    """Measured quality per backend (written by ``python -m models.text.quality``); {} if absent."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
