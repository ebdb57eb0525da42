"""The BERT-family architectures we load: each one's ``config.json`` read into a
:class:`~models.text.config.BertConfig`, and its checkpoint's tensor names mapped onto ours.

Supported ``model_type`` values and their papers:

- ``bert`` (Devlin et al. 2019), ``roberta`` (Liu et al. 2019), ``xlm-roberta`` (Conneau et al.
  2020), ``camembert`` (Martin et al. 2020): one layout; the RoBERTa family offsets positions.
- ``distilbert`` (Sanh et al. 2019): BERT without segments, its own tensor names.
- ``mpnet`` (Song et al. 2020): RoBERTa-style embeddings plus a bucketed relative position bias
  (T5's, Raffel et al. 2020) shared by every layer.
- ``modernbert`` (Warner et al. 2024): pre-LN, rotary positions, GeGLU, no biases, local layers
  with a sliding window between global ones.

Our names (``models.text.bert``): ``embeddings.{word,position,token_type,norm}``,
``layers.{i}.{qkv,attn_out,attn_norm,ffn_in,ffn_out,ffn_norm}``, ``relative_bias``,
``final_norm``. Q, K and V are fused into one ``qkv`` matrix (rows q; k; v).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from models.text.config import BertConfig

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
# Prefixes a checkpoint saved from a task model (e.g. ``BertForMaskedLM``) puts on the encoder's
# tensors; a checkpoint of the bare model (what sentence-transformers saves) has none.
_PREFIXES = ("bert.", "roberta.", "distilbert.", "mpnet.", "model.")


def _activation(raw: Mapping[str, Any], key: str) -> str:
    name = raw.get(key, "gelu")
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"{key} {name!r} is not supported; supported: {', '.join(sorted(_ACTIVATIONS))}"
        )
    return _ACTIVATIONS[name]


def _shape(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The sizes every BERT-style ``config.json`` names the same way."""
    keys = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
    )
    return {key: int(raw[key]) for key in keys}


def _bert(raw: Mapping[str, Any], offset_positions: bool) -> BertConfig:
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"position_embedding_type {raw['position_embedding_type']!r} is not supported "
            "(absolute only)"
        )
    pad = int(raw.get("pad_token_id") or 0)
    return BertConfig(
        **_shape(raw),
        type_vocab_size=raw.get("type_vocab_size", 2),
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        pad_token_id=pad,
        architecture=raw["model_type"],
        activation=_activation(raw, "hidden_act"),
        position_offset=pad + 1 if offset_positions else 0,
    )


def _distilbert(raw: Mapping[str, Any]) -> BertConfig:
    return BertConfig(
        vocab_size=raw["vocab_size"],
        hidden_size=raw["dim"],
        num_hidden_layers=raw["n_layers"],
        num_attention_heads=raw["n_heads"],
        intermediate_size=raw["hidden_dim"],
        max_position_embeddings=raw["max_position_embeddings"],
        type_vocab_size=0,
        layer_norm_eps=1e-12,  # fixed in DistilBERT's code, not in its config
        pad_token_id=int(raw.get("pad_token_id") or 0),
        architecture="distilbert",
        activation=_activation(raw, "activation"),
    )


def _mpnet(raw: Mapping[str, Any]) -> BertConfig:
    pad = int(raw.get("pad_token_id", 1))
    return BertConfig(
        **_shape(raw),
        type_vocab_size=0,
        layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        pad_token_id=pad,
        architecture="mpnet",
        activation=_activation(raw, "hidden_act"),
        position_offset=pad + 1,
        relative_buckets=raw.get("relative_attention_num_buckets", 32),
    )


def _modernbert_layers(raw: Mapping[str, Any]) -> tuple[list[str], list[float]]:
    """Each layer's kind (``full_attention`` / ``sliding_attention``) and rotary base, from
    either transformers 5's ``layer_types`` + ``rope_parameters`` or 4.x's
    ``global_attn_every_n_layers`` + ``global_rope_theta`` / ``local_rope_theta``."""
    n = raw["num_hidden_layers"]
    kinds = raw.get("layer_types") or [
        "sliding_attention" if i % raw.get("global_attn_every_n_layers", 3) else "full_attention"
        for i in range(n)
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
    kinds, thetas = _modernbert_layers(raw)
    half = int(raw.get("local_attention", 128)) // 2
    return BertConfig(
        **_shape(raw),
        type_vocab_size=0,
        layer_norm_eps=raw.get("norm_eps", 1e-5),
        pad_token_id=int(raw.get("pad_token_id") or 0),
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
        ValueError: an architecture we do not load, or a setting it uses that we do not
            implement (the message names it); a missing key as ``config.json lacks ...``.
    """
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


# ----------------------------------------------------------------------------- tensor names


def _strip_prefix(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The encoder's tensors without a task model's prefix (``bert.``, ``model.``, ...)."""
    for prefix in _PREFIXES:
        if any(name.startswith(prefix + "embeddings.") for name in tensors):
            return {n[len(prefix) :]: t for n, t in tensors.items() if n.startswith(prefix)}
    return dict(tensors)


def _affine(out: dict[str, Tensor], dst: str, get: Callable[[str], Tensor], src: str) -> None:
    """A linear layer's or a LayerNorm's weight and bias, renamed."""
    out[dst + ".weight"] = get(src + ".weight")
    out[dst + ".bias"] = get(src + ".bias")


def _qkv(out: dict[str, Tensor], dst: str, get: Callable[[str], Tensor], srcs: list[str]) -> None:
    out[dst + ".weight"] = torch.cat([get(s + ".weight") for s in srcs])
    out[dst + ".bias"] = torch.cat([get(s + ".bias") for s in srcs])


def _bert_layers(get: Callable[[str], Tensor], config: BertConfig) -> dict[str, Tensor]:
    """BERT / RoBERTa / XLM-R / CamemBERT (``encoder.layer.i.attention.self.query`` ...),
    MPNet (``encoder.layer.i.attention.attn.q`` ...) and DistilBERT
    (``transformer.layer.i.attention.q_lin`` ...)."""
    out: dict[str, Tensor] = {}
    for i in range(config.num_hidden_layers):
        dst = f"layers.{i}."
        if config.architecture == "distilbert":
            src = f"transformer.layer.{i}."
            names = {
                "qkv": [src + f"attention.{p}_lin" for p in "qkv"],
                "attn_out": src + "attention.out_lin",
                "attn_norm": src + "sa_layer_norm",
                "ffn_in": src + "ffn.lin1",
                "ffn_out": src + "ffn.lin2",
                "ffn_norm": src + "output_layer_norm",
            }
        else:
            src = f"encoder.layer.{i}."
            mpnet = config.architecture == "mpnet"
            names = {
                "qkv": [src + "attention.attn." + p for p in "qkv"]
                if mpnet
                else [src + "attention.self." + p for p in ("query", "key", "value")],
                "attn_out": src + ("attention.attn.o" if mpnet else "attention.output.dense"),
                "attn_norm": src
                + ("attention.LayerNorm" if mpnet else "attention.output.LayerNorm"),
                "ffn_in": src + "intermediate.dense",
                "ffn_out": src + "output.dense",
                "ffn_norm": src + "output.LayerNorm",
            }
        qkv = names.pop("qkv")
        assert isinstance(qkv, list)
        _qkv(out, dst + "qkv", get, qkv)
        for ours, theirs in names.items():
            assert isinstance(theirs, str)
            _affine(out, dst + ours, get, theirs)
    return out


def _modernbert_tensors(get: Callable[[str], Tensor], config: BertConfig) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {"embeddings.word.weight": get("embeddings.tok_embeddings.weight")}

    def take(dst: str, src: str, has_bias: bool) -> None:
        out[dst + ".weight"] = get(src + ".weight")
        if has_bias:
            out[dst + ".bias"] = get(src + ".bias")

    take("embeddings.norm", "embeddings.norm", config.norm_bias)
    for i in range(config.num_hidden_layers):
        src, dst = f"layers.{i}.", f"layers.{i}."
        if i > 0:  # layer 0's pre-attention norm is the embeddings' norm
            take(dst + "attn_norm", src + "attn_norm", config.norm_bias)
        take(dst + "qkv", src + "attn.Wqkv", config.bias)
        take(dst + "attn_out", src + "attn.Wo", config.bias)
        take(dst + "ffn_norm", src + "mlp_norm", config.norm_bias)
        take(dst + "ffn_in", src + "mlp.Wi", config.bias)
        take(dst + "ffn_out", src + "mlp.Wo", config.bias)
    take("final_norm", "final_norm", config.norm_bias)
    return out


def state_from_checkpoint(tensors: Mapping[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """A checkpoint's tensors under our names (Q, K, V fused); unused ones (poolers, heads,
    ``position_ids`` buffers) are left out.

    Raises:
        ValueError: a tensor the architecture needs is missing (the message names it).
    """
    found = _strip_prefix(tensors)

    def get(name: str) -> Tensor:
        try:
            return found[name]
        except KeyError:
            raise ValueError(f"model.safetensors lacks {name!r}") from None

    if config.architecture == "modernbert":
        return _modernbert_tensors(get, config)
    out = {
        "embeddings.word.weight": get("embeddings.word_embeddings.weight"),
        "embeddings.position.weight": get("embeddings.position_embeddings.weight"),
        "embeddings.norm.weight": get("embeddings.LayerNorm.weight"),
        "embeddings.norm.bias": get("embeddings.LayerNorm.bias"),
    }
    if config.type_vocab_size:
        out["embeddings.token_type.weight"] = get("embeddings.token_type_embeddings.weight")
    if config.relative_buckets:
        out["relative_bias.weight"] = get("encoder.relative_attention_bias.weight")
    return out | _bert_layers(get, config)
