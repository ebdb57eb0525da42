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
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from models.informer.config import InformerConfig
from models.informer.model import Informer
from models.informer.scaler import StandardScaler
from models.informer.timefeatures import feature_names

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"
PREFIX = "informer-"


def save_checkpoint(
    directory: Path,
    model: Informer,
    scaler: StandardScaler,
    channels: list[str],
    training: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Write ``model.safetensors`` and ``config.json`` into ``directory`` (``data``: the
    :class:`~models.training.data.source.DataSource` record the model was trained on)."""
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
        "time_features": {"encoding": "timeF", "names": list(feature_names(c.freq))},
        "scaler": {"mean": scaler.mean.tolist(), "std": scaler.std.tolist()},
        "training": training or {},
    }
    if data is not None:
        meta["data"] = data
    (directory / "config.json").write_text(json.dumps(meta, indent=2) + "\n")


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded; the message names the folder, what is wrong
    with it and how to fix it."""


def load_checkpoint(directory: Path, device: str = "cpu") -> tuple[Informer, dict[str, Any]]:
    """The model (eval mode, on ``device``) and the parsed ``config.json``.

    Checks what is cheap to check before serving: both files are there, ``config.json`` is a JSON
    object with the keys the forecaster reads and a model config that builds, and the weights
    have exactly the names and shapes that config builds (nothing runs the model).

    Raises:
        CheckpointError: one of those checks failed (the message names ``directory``).
    """
    directory = Path(directory)
    layout = (
        "a checkpoint folder holds config.json and model.safetensors, "
        "as `attnserve train --out DIR` writes them"
    )
    again = "write the folder again with `attnserve train --out DIR`"
    rewrite = f"fix it, or {again}"

    def error(problem: str, fix: str) -> CheckpointError:
        return CheckpointError(f"{directory}: {problem}; {fix}")

    def few(items: list[str]) -> str:
        more = f" and {len(items) - 3} more" if len(items) > 3 else ""
        return ", ".join(items[:3]) + more

    if not directory.is_dir():
        raise error("no such folder" if not directory.exists() else "not a folder", layout)
    for file in ("config.json", "model.safetensors"):
        if not (directory / file).is_file():
            raise error(f"{file} is missing", layout)

    # config.json: JSON, with the keys the forecaster reads, of the right JSON types.
    try:
        meta = json.loads((directory / "config.json").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"config.json is not valid JSON ({exc})", rewrite) from None
    if not isinstance(meta, dict):
        raise error(f"config.json holds a JSON {type(meta).__name__}, not an object", rewrite)
    required = {
        "model": dict,
        "context": int,
        "label_len": int,
        "horizon": int,
        "channels": list,
        "freq": str,
        "scaler": dict,
    }
    if missing := [k for k in required if k not in meta]:
        raise error(f"config.json lacks {few(missing)} (it needs {', '.join(required)})", rewrite)
    wrong = [
        f"{k} is {type(meta[k]).__name__}, not {t.__name__}"
        for k, t in required.items()
        if not isinstance(meta[k], t) or isinstance(meta[k], bool)  # JSON true is no int
    ]
    if not wrong:
        for stat in ("mean", "std"):
            values = meta["scaler"].get(stat)
            if not isinstance(values, list) or len(values) != len(meta["channels"]):
                wrong.append(f"scaler.{stat} needs one number per channel")
    if wrong:
        raise error(f"in config.json, {few(wrong)}", rewrite)
    try:
        model = Informer(InformerConfig.from_dict(meta["model"]))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise error(
            f'config.json\'s "model" is not a valid Informer config ({exc})', rewrite
        ) from None

    # Weights: exactly the names and shapes the config builds (load_state_dict's own error lists
    # every key; this names the first few of each kind).
    try:
        state = load_file(str(directory / "model.safetensors"), device=device)
    except (SafetensorError, OSError) as exc:
        raise error(
            f"model.safetensors cannot be read ({exc})", f"copy it again, or {again}"
        ) from None
    expected = model.state_dict()
    problems = []
    if absent := sorted(expected.keys() - state.keys()):
        problems.append(f"missing {few(absent)}")
    if extra := sorted(state.keys() - expected.keys()):
        problems.append(f"unexpected {few(extra)}")
    if reshaped := [
        f"{k} is {list(state[k].shape)} but the config needs {list(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]:
        problems.append(few(reshaped))
    if problems:
        raise error(
            f"model.safetensors does not match config.json ({'; '.join(problems)})",
            "keep the config.json and model.safetensors of one training run together",
        )
    model.load_state_dict(state)
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
