"""The BERT-family architectures we load: each one's ``config.json`` read into a
:class:`~models.text.network.config.BertConfig`, and the task heads its checkpoints may hold beside the
encoder (:data:`KNOWN_HEAD_PREFIXES`); :mod:`models.text.folders.checkpoint` maps the tensor names.

Supported ``model_type`` values and their papers:

- ``bert`` (Devlin et al. 2019), ``roberta`` (Liu et al. 2019), ``xlm-roberta`` (Conneau et al.
  2020), ``camembert`` (Martin et al. 2020): one layout; the RoBERTa family offsets positions.
- ``distilbert`` (Sanh et al. 2019): BERT without segments, its own tensor names.
- ``mpnet`` (Song et al. 2020): RoBERTa-style embeddings plus a bucketed relative position bias
  (T5's, Raffel et al. 2020) shared by every layer.
- ``modernbert`` (Warner et al. 2024): pre-LN, rotary positions, GeGLU, no biases, local layers
  with a sliding window between global ones.

A folder is served only when it can be served exactly: ``config.json``'s sizes must be integers
within sane bounds (the refusal names the key), and :mod:`models.text.folders.checkpoint` refuses a tensor
that neither the encoder nor a known head uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from models.text.network.config import BertConfig

_MPNET_PADDING_IDX = 1  # transformers' modeling_mpnet.py: MPNetEmbeddings.padding_idx
# What a checkpoint's hidden_act may say, and which of our activations computes it.
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
# The task heads transformers puts beside (or, for the pooler, inside) the encoder, which an
# embedding does not use: a checkpoint may hold them and still be served as an encoder. Read
# from transformers' ``modeling_*.py`` of each architecture we load; the classification loader
# (:mod:`models.text.network.heads`) reads some of them itself from the same file.
KNOWN_HEAD_PREFIXES: tuple[str, ...] = (
    "pooler.",  # BertModel, RobertaModel (+ XLM-R, CamemBERT), MPNetModel: add_pooling_layer
    "classifier.",  # ...ForSequenceClassification / TokenClassification / MultipleChoice
    "pre_classifier.",  # DistilBertForSequenceClassification / MultipleChoice
    "qa_outputs.",  # ...ForQuestionAnswering
    "head.",  # ModernBertPredictionHead (masked LM and every classification task)
    "decoder.",  # ModernBertForMaskedLM's output projection
    "lm_head.",  # RobertaLMHead (+ XLM-R, CamemBERT), MPNetLMHead
    "cls.",  # BertForPreTraining / MaskedLM / NextSentencePrediction / LMHeadModel
    "vocab_transform.",  # DistilBertForMaskedLM
    "vocab_layer_norm.",
    "vocab_projector.",
)
# Upper bounds far above any published encoder: a larger value is a broken config.json, refused
# before anything is built from it (the memory and work estimates multiply these sizes).
_SIZE_LIMITS = {
    "vocab_size": 1 << 24,
    "hidden_size": 1 << 16,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10,
    "intermediate_size": 1 << 18,
    "max_position_embeddings": 1 << 20,
}


def _activation(raw: Mapping[str, Any], key: str) -> str:
    name = raw.get(key, "gelu")
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"{key} {name!r} is not supported; supported: {', '.join(sorted(_ACTIVATIONS))}"
        )
    return _ACTIVATIONS[name]


def _count(raw: Mapping[str, Any], key: str, limit: int, low: int = 1) -> int:
    """``raw[key]``, which must be an integer in ``[low, limit]`` (``true`` is no integer)."""
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"config.json {key} must be an integer, got {value!r}")
    if not low <= value <= limit:
        raise ValueError(f"config.json {key} is {value}, outside [{low}, {limit}]")
    return value


def _optional_count(raw: Mapping[str, Any], key: str, default: int, low: int = 1) -> int:
    """An optional integer setting (absent or null: ``default``), checked as :func:`_count`."""
    return default if raw.get(key) is None else _count(raw, key, 1 << 20, low)


def _eps(raw: Mapping[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"config.json {key} must be a number in (0, 1), got {value!r}")
    return float(value)


def _shape(raw: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The six sizes of the encoder, each checked (:func:`_count`); ``names`` maps ours to the
    config.json keys where they differ (DistilBERT's ``dim``, ``n_layers``, ...)."""
    names = names or {}
    return {key: _count(raw, names.get(key, key), limit) for key, limit in _SIZE_LIMITS.items()}


def _bert(raw: Mapping[str, Any], offset_positions: bool) -> BertConfig:
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"position_embedding_type {raw['position_embedding_type']!r} is not supported "
            "(absolute only)"
        )
    pad = _optional_count(raw, "pad_token_id", 0, low=0)
    return BertConfig(
        **_shape(raw),
        type_vocab_size=_optional_count(raw, "type_vocab_size", 2, low=0),
        layer_norm_eps=_eps(raw, "layer_norm_eps", 1e-12),
        pad_token_id=pad,
        architecture=raw["model_type"],
        activation=_activation(raw, "hidden_act"),
        position_offset=pad + 1 if offset_positions else 0,
    )


def _distilbert(raw: Mapping[str, Any]) -> BertConfig:
    names = {
        "hidden_size": "dim",
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "intermediate_size": "hidden_dim",
    }
    return BertConfig(
        **_shape(raw, names),
        type_vocab_size=0,
        layer_norm_eps=1e-12,  # fixed in DistilBERT's code, not in its config
        pad_token_id=_optional_count(raw, "pad_token_id", 0, low=0),
        architecture="distilbert",
        activation=_activation(raw, "activation"),
    )


def _mpnet(raw: Mapping[str, Any]) -> BertConfig:
    # transformers' MPNetEmbeddings fixes padding_idx = 1 whatever config.json's pad_token_id
    # says, so positions start at 2 even under a BERT tokenizer (pad 0), as fine-tunes ship.
    # (It also gives a token whose id is 1 the padding position; a BERT vocabulary's id 1 is
    # ``[unused0]``, which no text tokenizes to.)
    return BertConfig(
        **_shape(raw),
        type_vocab_size=0,
        layer_norm_eps=_eps(raw, "layer_norm_eps", 1e-12),
        pad_token_id=_optional_count(raw, "pad_token_id", 1, low=0),
        architecture="mpnet",
        activation=_activation(raw, "hidden_act"),
        position_offset=_MPNET_PADDING_IDX + 1,
        relative_buckets=_optional_count(raw, "relative_attention_num_buckets", 32),
    )


def _modernbert_layers(raw: Mapping[str, Any]) -> tuple[list[str], list[float]]:
    """Each layer's kind (``full_attention`` / ``sliding_attention``) and rotary base, from
    either transformers 5's ``layer_types`` + ``rope_parameters`` or 4.x's
    ``global_attn_every_n_layers`` + ``global_rope_theta`` / ``local_rope_theta``."""
    n = _count(raw, "num_hidden_layers", _SIZE_LIMITS["num_hidden_layers"])
    every = _optional_count(raw, "global_attn_every_n_layers", 3)
    kinds = raw.get("layer_types") or [
        "sliding_attention" if i % every else "full_attention" for i in range(n)
    ]
    rope = raw.get("rope_parameters") or {}
    thetas = {
        "full_attention": raw.get("global_rope_theta", 160_000.0),
        "sliding_attention": raw.get("local_rope_theta", 10_000.0),
    }
    for kind, params in rope.items():
        if params is None:
            continue
        if params.get("rope_type", "default") != "default":
            raise ValueError(
                f"rope_type {params['rope_type']!r} is not supported (default rotary only)"
            )
        thetas[kind] = params.get("rope_theta", thetas.get(kind))
    unknown = sorted(set(kinds) - set(thetas))
    if unknown or len(kinds) != n:
        raise ValueError(f"layer_types must list {n} of full_attention/sliding_attention")
    return kinds, [float(thetas[kind]) for kind in kinds]


def _modernbert(raw: Mapping[str, Any]) -> BertConfig:
    if bool(raw.get("attention_bias", False)) != bool(raw.get("mlp_bias", False)):
        raise ValueError("attention_bias and mlp_bias must agree")
    shape = _shape(raw)
    kinds, thetas = _modernbert_layers(raw)
    half = _optional_count(raw, "local_attention", 128, low=2) // 2
    return BertConfig(
        **shape,
        type_vocab_size=0,
        layer_norm_eps=_eps(raw, "norm_eps", 1e-5),
        pad_token_id=_optional_count(raw, "pad_token_id", 0, low=0),
        architecture="modernbert",
        activation=_activation(raw, "hidden_activation"),
        absolute_positions=False,
        rotary_thetas=tuple(thetas),
        windows=tuple(half if kind == "sliding_attention" else None for kind in kinds),
        pre_norm=True,
        glu=True,
        bias=bool(raw.get("attention_bias", False)),
        norm_bias=bool(raw.get("norm_bias", False)),
    )


_READERS: dict[str, Callable[[Mapping[str, Any]], BertConfig]] = {
    "bert": lambda raw: _bert(raw, offset_positions=False),
    "roberta": lambda raw: _bert(raw, offset_positions=True),
    "xlm-roberta": lambda raw: _bert(raw, offset_positions=True),
    "camembert": lambda raw: _bert(raw, offset_positions=True),
    "distilbert": _distilbert,
    "mpnet": _mpnet,
    "modernbert": _modernbert,
}
ARCHITECTURES: tuple[str, ...] = tuple(_READERS)


def read_config(raw: Mapping[str, Any]) -> BertConfig:
    """A transformers ``config.json`` (as a dict) as our :class:`BertConfig`.

    Raises:
        ValueError: an architecture we do not load, a setting it uses that we do not
            implement, or a size that is no positive integer or is absurd (the message names
            it); a missing key as ``config.json lacks ...``.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"config.json must hold a JSON object, not {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type not in _READERS:
        raise ValueError(
            f"architecture {model_type!r} (config.json model_type) is not supported; "
            f"supported: {', '.join(ARCHITECTURES)}"
        )
    try:
        return _READERS[model_type](raw)
    except KeyError as exc:
        raise ValueError(f"config.json lacks {exc.args[0]!r}, which {model_type} needs") from None
    except (TypeError, AttributeError) as exc:  # a setting of the wrong JSON type
        raise ValueError(f"config.json is malformed for {model_type}: {exc}") from None
