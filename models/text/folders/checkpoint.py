"""A checkpoint's tensors mapped onto our encoder's names, every tensor accounted for.

Our names (``models.text.network.bert``): ``embeddings.{word,position,token_type,norm}``,
``layers.{i}.{qkv,attn_out,attn_norm,ffn_in,ffn_out,ffn_norm}``, ``relative_bias``,
``final_norm``. Q, K and V are fused into one ``qkv`` matrix (rows q; k; v).

Each tensor of the checkpoint is either used by the encoder, a known task head
(:data:`~models.text.network.architectures.KNOWN_HEAD_PREFIXES`) or a saved buffer; anything else (a
layer past ``num_hidden_layers``, a module we do not run) refuses the folder, since skipping it
would serve a different model than the checkpoint holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor

from models.text.network.architectures import KNOWN_HEAD_PREFIXES
from models.text.network.config import BertConfig

# Prefixes a checkpoint saved from a task model (e.g. ``BertForMaskedLM``) puts on the encoder's
# tensors; a checkpoint of the bare model (what sentence-transformers saves) has none.
_PREFIXES = ("bert.", "roberta.", "distilbert.", "mpnet.", "model.")
# Buffers older transformers saved with the weights: derived from the sequence, never learned.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_SHOWN = 3  # unexpected tensors named in the refusal
_LAYER = re.compile(r"(?:^|\.)layers?\.(\d+)\.")


def _prefix(names: Iterable[str]) -> str:
    """The task model's prefix on the encoder's tensors (``bert.``, ``model.``, ...); "" for a
    bare encoder (what sentence-transformers saves)."""
    names = list(names)
    for prefix in _PREFIXES:
        if any(name.startswith(prefix + "embeddings.") for name in names):
            return prefix
    return ""


def _unaccounted(names: Iterable[str], prefix: str, used: set[str]) -> list[str]:
    """The checkpoint's tensors that the encoder did not use and that are no known head or
    buffer. A tensor outside the encoder's prefix can only be a head: a bare ``embeddings.*``
    beside ``bert.embeddings.*`` is a second encoder, not ours."""
    out = []
    for name in names:
        inside = name.startswith(prefix)
        inner = name[len(prefix) :] if inside else name
        if inside and (inner in used or inner in _BUFFERS):
            continue
        if inner.startswith(KNOWN_HEAD_PREFIXES):
            continue
        out.append(name)
    return sorted(out)


def _refuse_unaccounted(unexpected: list[str], config: BertConfig) -> None:
    """Refuse a checkpoint holding tensors we would silently skip, naming the first few; a layer
    past the configured count is said as such (the usual cause: a wrong ``num_hidden_layers``)."""
    if not unexpected:
        return
    shown = ", ".join(repr(name) for name in unexpected[:_SHOWN])
    more = f" and {len(unexpected) - _SHOWN} more" if len(unexpected) > _SHOWN else ""
    layers = [int(m.group(1)) for name in unexpected if (m := _LAYER.search(name))]
    hint = ""
    if layers and max(layers) >= config.num_hidden_layers:
        hint = (
            f" (the checkpoint holds layers up to index {max(layers)}, config.json gives "
            f"{config.num_hidden_layers})"
        )
    raise ValueError(
        f"model.safetensors holds {len(unexpected)} tensors that neither the encoder nor a known "
        f"task head uses: {shown}{more}{hint}"
    )


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
    """A checkpoint's tensors under our names (Q, K, V fused). Known task heads
    (:data:`KNOWN_HEAD_PREFIXES`) and ``position_ids`` / ``token_type_ids`` buffers are left out;
    any other tensor the encoder does not use is an error, since skipping it would serve a
    different model than the checkpoint holds.

    Raises:
        ValueError: a tensor the architecture needs is missing, or one it does not use belongs
            to no known head (the message names them).
    """
    prefix = _prefix(tensors)
    used: set[str] = set()

    def get(name: str) -> Tensor:
        try:
            tensor = tensors[prefix + name]
        except KeyError:
            raise ValueError(f"model.safetensors lacks {prefix + name!r}") from None
        used.add(name)
        return tensor

    state = _encoder_tensors(get, config)
    _refuse_unaccounted(_unaccounted(tensors, prefix, used), config)
    return state


def _encoder_tensors(get: Callable[[str], Tensor], config: BertConfig) -> dict[str, Tensor]:
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
