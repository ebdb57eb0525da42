"""Recognising a zero-shot forecaster's folder and loading it with its forecaster class.

* TimesFM 2.5: a folder transformers wrote (``config.json`` with ``model_type`` ``timesfm2_5``).
* Chronos-2: a folder the ``chronos-forecasting`` package reads with
  ``Chronos2Pipeline.from_pretrained`` (``config.json`` naming ``Chronos2Model`` with a
  ``chronos_config``).

Both may carry attnserve's optional ``attnserve.json`` (``freq``, ``data``: see
:mod:`models.hf_forecast.folder`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from models.hf_forecast.folder import FolderError, read_config, read_sidecar

# kind -> "module:class" of its forecaster (imported only when a folder of that kind loads).
FORECASTERS = {
    "timesfm2_5": "models.zero_shot.timesfm:TimesFM25Forecaster",
    "chronos2": "models.zero_shot.chronos2:Chronos2Forecaster",
}


def zero_shot_kind(folder: Path) -> str | None:
    """The folder's kind (a key of :data:`FORECASTERS`), or None when it is neither."""
    config = read_config(folder)
    if config is None:
        return None
    if config.get("model_type") == "timesfm2_5":
        return "timesfm2_5"
    if "Chronos2Model" in (config.get("architectures") or []) or "chronos_config" in config:
        return "chronos2"
    return None


def load_zero_shot(folder: str | Path, device: str = "cpu") -> Any:
    """The folder's forecaster; :class:`FolderError` says what is wrong with it."""
    folder = Path(folder)
    kind = zero_shot_kind(folder)
    if kind is None:
        raise FolderError("not a TimesFM 2.5 or Chronos-2 folder")
    if not any(folder.glob("*.safetensors")) and not (folder / "pytorch_model.bin").is_file():
        raise FolderError("no weights (model.safetensors) beside config.json")
    module, name = FORECASTERS[kind].split(":")
    try:
        forecaster_class = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        extra = "chronos" if kind == "chronos2" else "transformers"
        raise FolderError(
            f"{kind} needs a package that is not installed ({exc.name}): "
            f"pip install 'attnserve[{extra}]'"
        ) from None
    return forecaster_class.load(folder, read_sidecar(folder), device)
