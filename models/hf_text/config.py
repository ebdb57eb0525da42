"""The shape of a transformers text backbone, read from its ``config.json`` before any weight loads.

Any architecture whose ``AutoModel`` class routes attention through transformers' attention
interface (``_supports_attention_backend``: Qwen3, Qwen2, Gemma 3, Llama, Mistral, NomicBERT,
ModernBERT-decoder, ...) can run our backends; one that does not (T5, DeBERTa-v2, ...) computes
attention in its own code and is refused by name. The fields mirror what the text models read from
:class:`~models.text.network.config.BertConfig` (sizes, limits, the card), plus what a decoder adds: key /
value heads (grouped-query attention) and an explicit head width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Upper bounds far above any published model: a larger value is a broken config.json.
_LIMITS = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 16,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10,
    "intermediate_size": 1 << 18,
    "max_position_embeddings": 1 << 22,
}


@dataclass(frozen=True)
class BackboneConfig:
    """What a transformers backbone's ``config.json`` says about its cost and limits.

    Attributes:
        architecture: ``model_type`` (``qwen3``, ``gemma3_text``, ...).
        model_class: the transformers class that loads it (``Qwen3Model``).
        num_key_value_heads: heads of keys and values (fewer than the queries' under
            grouped-query attention).
        head_width: width of one attention head (``head_dim`` when the config sets it).
        causal: set once the model is built, from its attention layers (a decoder's are).
    """

    architecture: str
    model_class: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_width: int
    intermediate_size: int
    max_position_embeddings: int
    causal: bool = True
    # What the BERT-family models have and a backbone does not (read by the shared text code).
    type_vocab_size: int = 0
    relative_buckets: int = 0
    windows: tuple[int | None, ...] = ()

    @property
    def head_dim(self) -> int:
        """Width of one attention head (``d`` in the attention legend)."""
        return self.head_width

    @property
    def max_tokens(self) -> int:
        """Longest input its positions cover (``max_position_embeddings``)."""
        return self.max_position_embeddings

    def global_layers(self) -> list[int]:
        """Every layer takes the requested backend (sliding-window layers are priced as global)."""
        return list(range(self.num_hidden_layers))


def _size(raw: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    limit = _LIMITS.get(key, 1 << 20)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise ValueError(f"config.json {key} must be an integer in [1, {limit}], got {value!r}")
    return value


def backbone_class(model_type: str) -> Any:
    """transformers' ``AutoModel`` class for ``model_type``, which must use the attention
    interface.

    Raises:
        ValueError: transformers is not installed, does not know ``model_type``, or its class
            computes attention itself (the message says what to do).
    """
    try:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    except ImportError as exc:
        raise ValueError(
            f"architecture {model_type!r} runs through transformers, which is not installed "
            f"({exc.name} is missing): pip install 'attnserve[transformers]'"
        ) from None
    name = MODEL_MAPPING_NAMES.get(model_type)
    if not isinstance(name, str):
        raise ValueError(
            f"architecture {model_type!r} (config.json model_type) is not one transformers "
            f"{transformers.__version__} loads with AutoModel; re-save the model with a "
            "transformers architecture"
        )
    cls = getattr(transformers, name, None)
    if cls is None or not getattr(cls, "_supports_attention_backend", False):
        raise ValueError(
            f"architecture {model_type!r} ({name}) computes attention in its own code, not "
            "through transformers' attention interface, so no attnserve backend can run in it"
        )
    return cls


def read_backbone(raw: Mapping[str, Any]) -> BackboneConfig:
    """A transformers ``config.json`` (as a dict) of a backbone we run through transformers.

    Raises:
        ValueError: as :func:`backbone_class`, or a size missing or out of range (named).
    """
    model_type = str(raw.get("model_type"))
    # Multimodal wrappers (Gemma 3) keep the text model's settings in a sub-config.
    nested = raw.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else raw
    cls = backbone_class(model_type)
    heads = _size(text, "num_attention_heads")
    hidden = _size(text, "hidden_size")
    kv = _size(text, "num_key_value_heads", heads)
    if heads % kv:
        raise ValueError(
            f"config.json num_key_value_heads {kv} does not divide num_attention_heads {heads}"
        )
    width = text.get("head_dim")
    return BackboneConfig(
        architecture=model_type,
        model_class=cls.__name__,
        vocab_size=_size(text, "vocab_size"),
        hidden_size=hidden,
        num_hidden_layers=_size(text, "num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_width=hidden // heads if width is None else _size(text, "head_dim"),
        intermediate_size=_size(text, "intermediate_size", 4 * hidden),
        max_position_embeddings=_size(text, "max_position_embeddings", 512),
    )
