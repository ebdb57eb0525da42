"""Checkpoints: ``model.safetensors`` (weights, no pickle) plus ``config.json`` (everything else).

``config.json`` holds the model config, the train-split scaler (mean/std per channel), channel
names, frequency and calendar-feature names, context/label/horizon lengths and a training record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from models.informer.config import InformerConfig
from models.informer.data import StandardScaler
from models.informer.model import Informer
from models.informer.timefeatures import FEATURE_NAMES

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"
PREFIX = "informer-"


def save_checkpoint(
    directory: Path,
    model: Informer,
    scaler: StandardScaler,
    channels: list[str],
    training: dict[str, Any] | None = None,
) -> None:
    """Write ``model.safetensors`` and ``config.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    c = model.config
    meta = {
        "model": c.to_dict(),
        "context": c.seq_len,
        "label_len": c.label_len,
        "horizon": c.pred_len,
        "channels": list(channels),
        "freq": c.freq,
        "time_features": {"encoding": "timeF", "names": list(FEATURE_NAMES[c.freq])},
        "scaler": {"mean": scaler.mean.tolist(), "std": scaler.std.tolist()},
        "training": training or {},
    }
    (directory / "config.json").write_text(json.dumps(meta, indent=2) + "\n")


def load_checkpoint(directory: Path, device: str = "cpu") -> tuple[Informer, dict[str, Any]]:
    """The model (eval mode, on ``device``) and the parsed ``config.json``."""
    meta = json.loads((directory / "config.json").read_text())
    model = Informer(InformerConfig.from_dict(meta["model"]))
    model.load_state_dict(load_file(str(directory / "model.safetensors"), device=device))
    return model.to(device).eval(), meta


def scaler_of(meta: dict[str, Any]) -> StandardScaler:
    return StandardScaler(np.asarray(meta["scaler"]["mean"]), np.asarray(meta["scaler"]["std"]))


def _natural_key(path: Path) -> list:
    """Sort ``...-h24`` before ``...-h168``: digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def shipped_dirs() -> dict[str, Path]:
    """Shipped Informer checkpoints by name (``informer-...`` folders with both files)."""
    if not WEIGHTS_DIR.is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(WEIGHTS_DIR.iterdir(), key=_natural_key)
        if p.name.startswith(PREFIX)
        and (p / "model.safetensors").is_file()
        and (p / "config.json").is_file()
    }


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
