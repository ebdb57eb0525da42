"""sentence-transformers' ``Dense`` modules after pooling: a linear map, an activation and, when
``use_residual`` is set, the input added back (through a bias-free projection when the widths
differ).

    head = read_dense_stack([folder / "2_Dense"])
    vectors = head(pooled)                  # [b, in] -> [b, out]

Read from each module's ``config.json`` and ``model.safetensors`` (``linear.weight``,
``linear.bias``, ``residual.weight``). The activation is named by its torch class
(``torch.nn.modules.activation.Tanh``); only the activations listed in :data:`ACTIVATIONS` are
built, as sentence-transformers itself refuses to import anything else without
``trust_remote_code``. A module that works on token embeddings (``module_input_name:
token_embeddings``, ColBERT's projection) is refused here: its output is not one vector per text.
The multi-vector path (:mod:`models.text.multi_vector`) reads it with ``on="token_embeddings"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from models.text.folders.weights import read_tensors

# sentence-transformers' default when config.json names no activation.
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "torch.nn.modules.linear.Identity": nn.Identity,
    "torch.nn.modules.activation.Tanh": nn.Tanh,
    "torch.nn.modules.activation.ReLU": nn.ReLU,
    "torch.nn.modules.activation.GELU": nn.GELU,
    "torch.nn.modules.activation.SiLU": nn.SiLU,
    "torch.nn.modules.activation.Sigmoid": nn.Sigmoid,
}


class DenseLayer(nn.Module):
    """One ``Dense`` module: ``activation(x W^T + b)`` (+ ``x`` or ``x R^T`` with a residual)."""

    def __init__(
        self, linear: nn.Linear, activation: nn.Module, residual: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.linear: nn.Linear = linear
        self.activation = activation
        self.residual = residual

    def forward(self, x: Tensor) -> Tensor:
        out = self.activation(self.linear(x))
        return out if self.residual is None else out + self.residual(x)


def _int(raw: dict[str, object], key: str, where: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}/config.json {key} must be a positive integer, got {value!r}")
    return value


def read_dense(folder: Path, on: str = "sentence_embedding") -> DenseLayer:
    """The ``Dense`` module saved in ``folder`` (float32, CPU), which must work on ``on``
    (``module_input_name``; a config without one is taken to mean ``on``, as
    sentence-transformers' multi-vector loader does for token-level ``Dense`` modules).

    Raises:
        ValueError: a missing or malformed file, an activation we do not build, a module on
            token embeddings, or weights that do not fit the config (the message names it).
    """
    from models.text.folders.embedding import read_json  # folder imports this module: read lazily

    where = folder.name
    raw = read_json(folder / "config.json")
    if not isinstance(raw, dict):
        raise ValueError(f"{where}/config.json must hold a JSON object")
    if raw.get("module_input_name", on) != on:
        raise ValueError(
            f"{where} is a Dense module on {raw['module_input_name']!r}; attnserve runs Dense "
            + (
                "modules on the pooled sentence embedding only"
                if on == "sentence_embedding"
                else f"modules on {on} only in a multi-vector model"
            )
        )
    fan_in, fan_out = _int(raw, "in_features", where), _int(raw, "out_features", where)
    name = str(raw.get("activation_function") or DEFAULT_ACTIVATION)
    if name not in ACTIVATIONS:
        raise ValueError(
            f"{where} activation_function {name!r} is not supported; supported: "
            f"{', '.join(sorted(ACTIVATIONS))}"
        )
    bias = bool(raw.get("bias", True))
    linear = nn.Linear(fan_in, fan_out, bias=bias)
    residual: nn.Module | None = None
    if raw.get("use_residual"):
        residual = nn.Identity() if fan_in == fan_out else nn.Linear(fan_in, fan_out, bias=False)
    if not (folder / "model.safetensors").is_file():
        hint = " (re-save it with safetensors)" if (folder / "pytorch_model.bin").is_file() else ""
        raise ValueError(f"{where} lacks model.safetensors{hint}")
    layer = DenseLayer(linear, ACTIVATIONS[name](), residual)
    tensors = read_tensors(folder, torch.device("cpu"))
    try:
        layer.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(
            f"{where}/model.safetensors does not fit its config.json: {detail}"
        ) from None
    return layer.eval().requires_grad_(False)


def read_dense_stack(folders: Sequence[Path]) -> nn.Sequential | None:
    """The ``Dense`` modules in ``folders``, in order, each one's width checked against the
    next; None when there are none."""
    if not folders:
        return None
    layers = [read_dense(folder) for folder in folders]
    for before, after, folder in zip(layers, layers[1:], folders[1:], strict=False):
        if before.linear.out_features != after.linear.in_features:
            raise ValueError(
                f"{folder.name} takes {after.linear.in_features} features, the module before "
                f"it gives {before.linear.out_features}"
            )
    return nn.Sequential(*layers)


def describe_dense(module: nn.Module) -> str:
    """One line for the model card: ``384 -> 768, Tanh`` (``+ residual``)."""
    layer = cast(DenseLayer, module)
    linear = layer.linear
    text = f"{linear.in_features} -> {linear.out_features}, {type(layer.activation).__name__}"
    return text + (" + residual" if layer.residual is not None else "")
