"""Hostile text-model folders: a tiny sentence-transformers BERT folder, each broken one way a
red-team found (issue 38 item 5), and the words the refusal must use.

    pristine = save_tiny_encoder(tmp / "base", "bert", layers=2)
    folder = hostile_folder(pristine, tmp / "negative-layers", "negative-layers")
    # SentenceEncoder.from_folder(folder) raises ValueError naming HOSTILE["negative-layers"][1]

Every case is a folder that would otherwise load (or load wrongly): each breaks one thing only.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

PRISTINE_LAYERS = 2  # the layers hostile_folder expects its pristine folder to hold


def _edit_json(name: str, change: Callable[[Any], Any]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / name
        path.write_text(json.dumps(change(json.loads(path.read_text()))))

    return apply


def _config(**values: Any) -> Callable[[Path], None]:
    return _edit_json("config.json", lambda raw: {**raw, **values})


def _module_path(path: str) -> Callable[[Path], None]:
    """Point the Pooling module of ``modules.json`` at ``path``."""

    def change(modules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**m, "path": path} if m["type"].endswith("Pooling") else m for m in modules]

    return _edit_json("modules.json", change)


def _add_tensor(folder: Path) -> None:
    tensors = load_file(folder / "model.safetensors")
    tensors["adapter.down.weight"] = torch.zeros(4, 4)
    save_file(tensors, folder / "model.safetensors")


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _huge_header(folder: Path) -> None:
    """A safetensors header whose length field claims 2**62 bytes."""
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + b"{}")


def _link_out(folder: Path) -> None:
    """The Pooling module as a link to a Pooling folder outside the model folder."""
    outside = folder.parent / f"{folder.name}-outside-pooling"
    shutil.copytree(folder / "1_Pooling", outside)
    (folder / "linked_pooling").symlink_to(outside, target_is_directory=True)
    _module_path("linked_pooling")(folder)


def _shard_out(folder: Path) -> None:
    """A sharded checkpoint whose index names a shard outside the folder."""
    outside = folder.parent / f"{folder.name}-outside.safetensors"
    (folder / "model.safetensors").rename(outside)
    names = load_file(outside)
    index = {"weight_map": dict.fromkeys(names, f"../{outside.name}")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


# case -> (how the folder is broken, words the one-line refusal must hold)
HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "negative-layers": (_config(num_hidden_layers=-3), "num_hidden_layers is -3, outside [1,"),
    "zero-layers": (_config(num_hidden_layers=0), "num_hidden_layers is 0, outside [1,"),
    "bool-heads": (_config(num_attention_heads=True), "num_attention_heads must be an integer"),
    "string-vocab": (_config(vocab_size="600"), "vocab_size must be an integer"),
    "absurd-hidden": (_config(hidden_size=2**40), "hidden_size is 1099511627776, outside"),
    "fewer-layers": (
        _config(num_hidden_layers=PRISTINE_LAYERS - 1),
        f"holds layers up to index {PRISTINE_LAYERS - 1}, config.json gives {PRISTINE_LAYERS - 1})",
    ),
    "extra-tensor": (_add_tensor, "a known task head uses: 'adapter.down.weight'"),
    "broken-tokenizer": (
        lambda f: (f / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "?"}}'),
        "tokenizer.json cannot be read by tokenizers (",
    ),
    "truncated-weights": (_truncate, "model.safetensors cannot be read as safetensors ("),
    "huge-header": (_huge_header, "model.safetensors cannot be read as safetensors (Error"),
    "module-parent": (_module_path("../.."), "modules.json path '../..' leads outside"),
    "module-absolute": (_module_path("/etc"), "modules.json path '/etc' leads outside"),
    "module-symlink": (_link_out, "modules.json path 'linked_pooling' leads outside"),
    "shard-outside": (_shard_out, "index.json names shard '../"),
}


def hostile_folder(pristine: Path, folder: Path, case: str) -> Path:
    """A copy of ``pristine`` (a sentence-transformers BERT folder of ``PRISTINE_LAYERS``
    layers) at ``folder``, broken as ``HOSTILE[case]`` says."""
    shutil.copytree(pristine, folder)
    HOSTILE[case][0](folder)
    return folder
