"""Read a text-embedding model folder: what to build, how to pool, how long a text may be.

Two layouts are understood (and told apart by what the folder holds):

- ``sentence-transformers``: ``modules.json`` names a ``Transformer`` module (its folder holds
  ``config.json``, ``model.safetensors``, ``tokenizer.json`` and ``sentence_bert_config.json``),
  a ``Pooling`` module and optionally ``Normalize``; ``config_sentence_transformers.json`` holds
  the prompts. Both the older pooling config (one ``pooling_mode_*_tokens`` flag per mode,
  sentence-transformers 2-5) and the newer one (``pooling_mode``, 6+) are read.
- ``transformers``: ``save_pretrained`` of a supported encoder plus its tokenizer; embedded as
  sentence-transformers would load it (mean pooling, no normalisation).

The ``Transformer`` module's backbone is one of our own BERT-family encoders
(:mod:`models.text.network.architectures`) or, in a sentence-transformers folder, any transformers model
that routes attention through transformers' attention interface (:mod:`models.hf_text`: Qwen3,
Gemma 3, ... embedders). ``Dense`` modules may follow the pooling (:mod:`models.text.network.dense`). Any
other module in ``modules.json`` (``LayerNorm``, ...) is refused by name rather than skipped, since
leaving it out would change the embeddings. A module's ``path`` must stay inside the
folder (no absolute path, no ``..``, no link leading out): a folder is data, not directions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.hf_text.config import BackboneConfig, read_backbone
from models.text.network.architectures import ARCHITECTURES, read_config
from models.text.network.config import BertConfig
from models.text.network.pooling import LEGACY_FLAGS, Pooling

# A tokenizer_config.json model_max_length at or above this means "no limit" (transformers
# writes 1e30 for tokenizers saved without one).
_UNLIMITED = 1_000_000
_MODULE_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")


@dataclass(frozen=True)
class TextFolder:
    """What a model folder says about the embedding model in it.

    Attributes:
        path: the folder.
        weights: the folder holding ``config.json``, ``model.safetensors``, ``tokenizer.json``.
        config: the encoder's shape (:class:`BackboneConfig` for a transformers backbone).
        pooling: how token states become one vector.
        normalize: whether embeddings are scaled to unit length (a ``Normalize`` module).
        max_tokens: longest text, special tokens included (``max_seq_length``).
        lowercase: texts are lower-cased before tokenizing (``do_lower_case``).
        prompts: named prompts, prepended to a text when a request names one.
        default_prompt_name: the prompt used when a request names none.
        layout: ``sentence-transformers`` or ``transformers``.
        dense: the folders of the ``Dense`` modules after pooling, in order.
    """

    path: Path
    weights: Path
    config: BertConfig | BackboneConfig
    pooling: Pooling
    normalize: bool
    max_tokens: int
    lowercase: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    layout: str = "sentence-transformers"
    dense: tuple[Path, ...] = ()

    @property
    def backbone(self) -> str:
        """``attnserve`` (our own encoder code) or ``transformers`` (through its attention
        interface)."""
        return "transformers" if isinstance(self.config, BackboneConfig) else "attnserve"


def read_json(path: Path) -> Any:
    """The JSON document in ``path``.

    Raises:
        ValueError: the file is missing or not valid JSON (the message names it).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"lacks {path.name}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path.name} is not valid JSON ({exc})") from None


def _object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise ValueError(f"{path.name} must hold a JSON object, not {type(raw).__name__}")
    return raw


def read_optional_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when there is no such file."""
    return _object(path) if path.is_file() else {}


def is_text_folder(path: Path) -> bool:
    """True when ``path`` looks like a text model: a ``modules.json``, or a transformers
    ``config.json`` of a supported encoder architecture."""
    if (path / "modules.json").is_file():
        return True
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("model_type") in ARCHITECTURES


def _module_kind(entry: Any) -> str:
    if not isinstance(entry, dict):
        raise ValueError(f"modules.json entries must be JSON objects, got {entry!r}")
    kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
    if kind not in _MODULE_KINDS:
        raise ValueError(
            f"modules.json module {entry.get('path') or entry.get('name')!r} is a "
            f"{entry.get('type')!r}, which attnserve does not run (supported modules: "
            f"{', '.join(_MODULE_KINDS)})"
        )
    return kind


def module_dir(root: Path, entry: dict[str, Any]) -> Path:
    """The folder of a ``modules.json`` entry, which must resolve (links followed) inside
    ``root``: an absolute path or a ``..`` would have us read files the folder does not hold."""
    given = str(entry.get("path", ""))
    folder = (root / given).resolve()
    if Path(given).is_absolute() or not folder.is_relative_to(root.resolve()):
        raise ValueError(f"modules.json path {given!r} leads outside the model folder")
    return root / given


def _pooling(raw: dict[str, Any], hidden: int) -> Pooling:
    if "pooling_mode" in raw:
        given = raw["pooling_mode"]
        modes = (given,) if isinstance(given, str) else tuple(given)
    else:
        modes = tuple(mode for flag, mode in LEGACY_FLAGS.items() if raw.get(flag))
    dim = raw.get("embedding_dimension", raw.get("word_embedding_dimension", hidden))
    if dim != hidden:
        raise ValueError(
            f"1_Pooling/config.json expects token embeddings of width {dim}, the encoder's "
            f"hidden_size is {hidden}"
        )
    return Pooling(modes, bool(raw.get("include_prompt", True)))


def max_tokens_of(weights: Path, config: BertConfig | BackboneConfig, given: int | None) -> int:
    """``max_seq_length`` (sentence_bert_config.json), else the tokenizer's
    ``model_max_length``, capped at what the position scheme covers."""
    if given is None:
        tokenizer_config = read_optional_json(weights / "tokenizer_config.json")
        length = tokenizer_config.get("model_max_length")
        given = int(length) if isinstance(length, int | float) and length < _UNLIMITED else None
    cap = config.max_tokens
    if given is None:
        return cap
    if not 2 <= given <= cap:
        raise ValueError(
            f"max_seq_length {given} is outside [2, {cap}] (the position table covers {cap})"
        )
    return int(given)


def transformer_text_folder(
    path: Path,
    weights: Path,
    config: BertConfig | BackboneConfig,
    pooling: Pooling,
    transformer: dict[str, Any],
    **fields: Any,
) -> TextFolder:
    """The :class:`TextFolder` of a ``Transformer`` module whose files are in ``weights``:
    its token limit and lower-casing come from ``transformer`` (that module's
    ``sentence_bert_config.json``: ``max_seq_length``, ``do_lower_case``); ``fields`` give the
    rest (``normalize`` is False unless given)."""
    fields.setdefault("normalize", False)
    return TextFolder(
        path,
        weights,
        config,
        pooling,
        max_tokens=max_tokens_of(weights, config, transformer.get("max_seq_length")),
        lowercase=bool(transformer.get("do_lower_case", False)),
        **fields,
    )


def read_prompts(st_config: dict[str, Any]) -> tuple[dict[str, str], str | None]:
    """The named prompts and the default prompt's name in ``config_sentence_transformers.json``.

    Raises:
        ValueError: ``prompts`` is not a JSON object, or the default names none of them.
    """
    given = st_config.get("prompts") or {}
    if not isinstance(given, dict):
        raise ValueError("config_sentence_transformers.json prompts must be a JSON object")
    prompts = {str(k): str(v) for k, v in given.items()}
    default_prompt = st_config.get("default_prompt_name")
    if default_prompt is not None and default_prompt not in prompts:
        raise ValueError(f"default_prompt_name {default_prompt!r} is not one of its prompts")
    return prompts, default_prompt


def read_weights_folder(
    path: Path, any_backbone: bool = False
) -> tuple[Path, BertConfig | BackboneConfig]:
    """``path`` and its encoder's shape, once the files every encoder folder needs are there.
    ``any_backbone``: an architecture of ours, else any transformers backbone
    (:func:`~models.hf_text.config.read_backbone`); otherwise ours only.

    Raises:
        ValueError: a missing file or an unsupported ``config.json``.
    """
    for name in ("config.json", "tokenizer.json"):
        if not (path / name).is_file():
            raise ValueError(f"lacks {name}")
    if (
        not (path / "model.safetensors").is_file()
        and not (path / "model.safetensors.index.json").is_file()
    ):
        hint = (
            " (re-save it with safe_serialization=True)"
            if (path / "pytorch_model.bin").is_file()
            else ""
        )
        raise ValueError(f"lacks model.safetensors{hint}")
    raw = read_json(path / "config.json")
    if any_backbone and isinstance(raw, dict) and raw.get("model_type") not in ARCHITECTURES:
        return path, read_backbone(raw)
    return path, read_config(raw)


def read_text_folder(path: Path) -> TextFolder:
    """Read ``path`` (either layout).

    Raises:
        ValueError: a missing file, an unsupported architecture or module, or settings that
            contradict each other; the message says which (the caller names the folder).
    """
    if not (path / "modules.json").is_file():
        weights, config = read_weights_folder(path)
        return TextFolder(
            path,
            weights,
            config,
            Pooling(("mean",)),
            normalize=False,
            max_tokens=max_tokens_of(weights, config, None),
            layout="transformers",
        )
    modules = read_json(path / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise ValueError("modules.json must list the model's modules")
    kinds = [(_module_kind(entry), module_dir(path, entry)) for entry in modules]
    order = [kind for kind, _ in kinds]
    dense = tuple(folder for kind, folder in kinds if kind == "Dense")
    normalized = order[-1:] == ["Normalize"]
    if order[:2] != ["Transformer", "Pooling"] or order[2 : len(order) - normalized] != [
        "Dense"
    ] * len(dense):
        raise ValueError(
            f"modules.json lists {order}; attnserve runs Transformer, Pooling[, Dense...]"
            "[, Normalize]"
        )
    weights, config = read_weights_folder(kinds[0][1], any_backbone=True)
    transformer = read_optional_json(weights / "sentence_bert_config.json")
    pooling_dir = dict(kinds)["Pooling"]
    pooling = _pooling(_object(pooling_dir / "config.json"), config.hidden_size)
    prompts, default_prompt = read_prompts(
        read_optional_json(path / "config_sentence_transformers.json")
    )
    return transformer_text_folder(
        path,
        weights,
        config,
        pooling,
        transformer,
        normalize="Normalize" in order,
        prompts=prompts,
        default_prompt_name=default_prompt,
        dense=dense,
    )
