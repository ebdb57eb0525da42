"""Recognising a transformers time-series folder and reading what serving needs beside it.

A folder written by ``save_pretrained`` holds ``config.json`` (with ``model_type`` and
``architectures``) and ``model.safetensors``. transformers records nothing about the data: no
channel names, no step. An optional ``attnserve.json`` beside them adds what a server can use:

    {"channels": ["HUFL", ..., "OT"],   # names for the columns payload (default "0", "1", ...)
     "freq": "15min",                   # the step: lets a request give `start` (and checks it)
     "data": {...},                     # the CSV and split it was trained on (evaluate)
     "training": {...}}                 # how it was trained (shown on the card)

``python -m models.training.patchtst_train`` writes it; a user may write it by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SIDECAR = "attnserve.json"

# model_type -> the prediction class served for it.
PREDICTION_CLASSES = {
    "patchtst": "PatchTSTForPrediction",
    "informer": "InformerForPrediction",
    "time_series_transformer": "TimeSeriesTransformerForPrediction",
    "autoformer": "AutoformerForPrediction",
}


class FolderError(ValueError):
    """A transformers time-series folder that cannot be served; the message says why and how
    to fix it (start-up prints it in one line, prefixed with the folder)."""


@dataclass(frozen=True)
class Sidecar:
    """The optional ``attnserve.json`` (see the module docstring)."""

    channels: tuple[str, ...] | None = None
    freq: str | None = None
    data: dict[str, Any] | None = None
    training: dict[str, Any] = field(default_factory=dict)


def read_config(folder: Path) -> dict[str, Any] | None:
    """``config.json`` as a dict, or None when the folder has none (or it is not JSON)."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def is_forecast_folder(folder: Path) -> bool:
    """Whether ``folder`` is a transformers time-series model (``model_type`` one of
    :data:`PREDICTION_CLASSES`), whatever its state; the loader then says what is wrong."""
    config = read_config(folder)
    return config is not None and config.get("model_type") in PREDICTION_CLASSES


def shipped_folders() -> dict[str, Path]:
    """transformers forecasters shipped under ``models/weights/`` (trained here), by name:
    ``--models patchtst-ettm1-h96-c512`` serves one as a path to it would."""
    weights = Path(__file__).resolve().parents[1] / "weights"
    if not weights.is_dir():
        return {}
    return {p.name: p for p in sorted(weights.iterdir()) if is_forecast_folder(p)}


def read_sidecar(folder: Path) -> Sidecar:
    """The folder's ``attnserve.json`` (an empty :class:`Sidecar` when there is none).

    Raises:
        FolderError: it is not a JSON object of the documented fields.
    """
    path = folder / SIDECAR
    if not path.is_file():
        return Sidecar()
    try:
        raw = json.loads(path.read_text())
    except ValueError as exc:
        raise FolderError(f"{SIDECAR} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise FolderError(f"{SIDECAR} must be a JSON object")
    unknown = sorted(set(raw) - {"channels", "freq", "data", "training"})
    if unknown:
        raise FolderError(
            f"{SIDECAR} has unknown field(s) {', '.join(unknown)}; "
            "known: channels, freq, data, training"
        )
    channels = raw.get("channels")
    if channels is not None and (
        not isinstance(channels, list)
        or not all(isinstance(c, str) and c for c in channels)
        or len(set(channels)) != len(channels)
    ):
        raise FolderError(f"{SIDECAR}: channels must be a list of distinct, non-empty names")
    freq = raw.get("freq")
    if freq is not None and not isinstance(freq, str):
        raise FolderError(f"{SIDECAR}: freq must be a string such as 'h' or '15min'")
    return Sidecar(
        tuple(channels) if channels is not None else None,
        freq,
        raw.get("data"),
        dict(raw.get("training") or {}),
    )


def write_sidecar(folder: Path, **fields: Any) -> None:
    """Write ``attnserve.json`` with ``fields`` (merged over what it already holds)."""
    path = folder / SIDECAR
    current = json.loads(path.read_text()) if path.is_file() else {}
    current.update({k: v for k, v in fields.items() if v is not None})
    path.write_text(json.dumps(current, indent=2) + "\n")
