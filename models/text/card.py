"""The model card of a sentence encoder, what ``GET /models`` shows, and its measured quality
(``quality.json``, written by ``attnserve evaluate``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from models.attention import BACKENDS, AttentionError, get_backend
from models.text.bert import BertEncoder

QUALITY_FILE = Path(__file__).with_name("quality.json")  # the shipped MiniLM's


class Described(Protocol):
    """What a card is made from: a served text model's network, limits and settings (a
    :class:`~models.text.encoder.SentenceEncoder` is one), so this module need not know the
    encoder class that imports it."""

    model: BertEncoder
    name: str
    source: str
    dim: int
    max_tokens: int
    default_max_tokens: int
    normalize: bool
    prompts: dict[str, str]
    default_prompt_name: str | None
    device: torch.device
    dtype: torch.dtype
    default_attention: str

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Resolved options for ``backend``; :class:`AttentionError` when it cannot run."""
        ...

    def quality(self) -> dict[str, Any]:
        """Measured quality per backend ({} when none was measured)."""
        ...


def describe(encoder: Described) -> dict[str, Any]:
    """What ``GET /models`` shows: architecture, limits, pooling, attention backends (and why
    any is refused) and measured quality."""
    supported, unavailable = [], {}
    for name in BACKENDS:
        try:
            encoder.check_attention(name, None)
        except AttentionError as exc:
            unavailable[name] = str(exc)
        else:
            supported.append(get_backend(name).describe())
    config = encoder.model.config
    card: dict[str, Any] = {
        "name": encoder.name,
        "task": "encode",
        "source": encoder.source,
        "architecture": config.architecture,
        "layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "heads": config.num_attention_heads,
        "dim": encoder.dim,
        "max_tokens": encoder.max_tokens,
        "default_max_tokens": encoder.default_max_tokens,
        "hard_max_tokens": config.max_tokens,
        "pooling": encoder.model.pooling.describe(),
        "normalize_default": encoder.normalize,
        "prompts": encoder.prompts,
        "default_prompt_name": encoder.default_prompt_name,
        "device": str(encoder.device),
        "dtype": str(encoder.dtype).removeprefix("torch."),
        "default_attention": encoder.default_attention,
        "backends": supported,
        "unavailable_backends": unavailable,
        "quality": encoder.quality(),
    }
    if config.windows:
        local = config.num_hidden_layers - len(config.global_layers())
        card["attention_layout"] = (
            f"{local} of {config.num_hidden_layers} layers attend within a sliding window of "
            f"±{max(w or 0 for w in config.windows)} tokens and always run exact banded "
            f"attention (linear in length); the requested backend runs the "
            f"{len(config.global_layers())} global layers"
        )
    return card


def load_quality(path: Path = QUALITY_FILE) -> dict[str, Any]:
    """Measured quality per backend (written by ``python -m models.text.quality``); {} if absent."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
