"""The masked-language-model head of a BERT-family checkpoint, on our packed token states.

BERT's prediction head (Devlin et al., "BERT", NAACL 2019, section 3.1, task 1): a dense
transform, its activation and a LayerNorm, then a decoder onto the vocabulary whose weight is
the word-embedding table (tied, Press & Wolf, EACL 2017) plus a bias per token. What SPLADE
(:mod:`models.text.splade`) reads as per-token vocabulary logits.

Where each architecture keeps it (transformers' ``...ForMaskedLM``):

==============  ===============================  ====================  =========================
family          transform (dense, norm)          activation            decoder bias
==============  ===============================  ====================  =========================
bert            ``cls.predictions.transform.*``  ``hidden_act``        ``cls.predictions.bias``
roberta, mpnet  ``lm_head.dense``, ``.layer_     gelu                  ``lm_head.bias``
                norm``
distilbert      ``vocab_transform``,             ``activation``        ``vocab_projector.bias``
                ``vocab_layer_norm``
modernbert      ``head.dense``, ``head.norm``    ``classifier_         ``decoder.bias``
                                                 activation``
==============  ===============================  ====================  =========================

The decoder's own weight is read where a checkpoint saved it untied, else the word embeddings.
The head runs in float32 whatever the network's precision: the logits feed a log and a max
over every token of a text, where bfloat16 rounding would move which entries are non-zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.text.network.config import BertConfig
from models.text.network.heads import family

# Our name -> the checkpoint's, per family (weights and biases; "decoder" may be absent: tied).
_TENSORS: dict[str, dict[str, str]] = {
    "bert": {
        "dense": "cls.predictions.transform.dense",
        "norm": "cls.predictions.transform.LayerNorm",
        "decoder": "cls.predictions.decoder",
        "bias": "cls.predictions.bias",
    },
    "roberta": {
        "dense": "lm_head.dense",
        "norm": "lm_head.layer_norm",
        "decoder": "lm_head.decoder",
        "bias": "lm_head.bias",
    },
    "distilbert": {
        "dense": "vocab_transform",
        "norm": "vocab_layer_norm",
        "decoder": "vocab_projector",
        "bias": "vocab_projector.bias",
    },
    "modernbert": {
        "dense": "head.dense",
        "norm": "head.norm",
        "decoder": "decoder",
        "bias": "decoder.bias",
    },
}
# The word-embedding table (the tied decoder weight), whatever the task model's prefix.
_WORD_EMBEDDINGS = ("embeddings.word_embeddings.weight", "embeddings.tok_embeddings.weight")
_ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
_ACTIVATIONS |= {"relu": F.relu, "silu": F.silu}


@dataclass(frozen=True)
class MLMHeadSpec:
    """Which layout and activation a checkpoint's MLM head has (``config.json``)."""

    architecture: str
    activation: str
    norm_eps: float

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], config: BertConfig) -> MLMHeadSpec:
        """The head of ``config`` (``raw``: its ``config.json``, for ModernBERT's activation)."""
        kind = family(config.architecture)
        if kind not in _TENSORS and config.architecture != "mpnet":
            raise ValueError(f"no masked-language-model head is known for {config.architecture}")
        activation = config.activation if kind in ("bert", "distilbert") else "gelu"
        if kind == "modernbert":
            given = str(raw.get("classifier_activation", "gelu"))
            activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}.get(
                given, given
            )
        if activation not in _ACTIVATIONS:
            raise ValueError(f"the MLM head's activation {activation!r} is not supported")
        return cls(config.architecture, activation, config.layer_norm_eps)


class MLMHead(nn.Module):
    """``[t, c]`` token states -> ``[t, V]`` float32 vocabulary logits.

    Dimension legend: t tokens, c hidden size, V vocabulary size.
    """

    def __init__(self, spec: MLMHeadSpec, hidden: int, vocab: int, norm_bias: bool) -> None:
        super().__init__()
        self.spec = spec
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=spec.norm_eps, bias=norm_bias)
        self.decoder = nn.Linear(hidden, vocab)

    @property
    def vocab_size(self) -> int:
        return int(self.decoder.out_features)

    def forward(self, states: Tensor) -> Tensor:
        """``[t, c] -> [t, V]``, in float32."""
        x = _ACTIVATIONS[self.spec.activation](self.dense(states.float()))
        return self.decoder(self.norm(x))


def _names(architecture: str, names: set[str]) -> tuple[str, dict[str, str]]:
    """The checkpoint's prefix-free layout for ``architecture`` (and its tensor names)."""
    kind = "roberta" if architecture == "mpnet" else family(architecture)
    layout = _TENSORS[kind]
    out = {}
    for ours in ("dense", "norm"):
        for part in ("weight", "bias"):
            if part == "bias" and f"{layout[ours]}.bias" not in names:
                continue  # ModernBERT may drop the biases (classifier_bias, norm_bias)
            out[f"{ours}.{part}"] = f"{layout[ours]}.{part}"
    decoder = f"{layout['decoder']}.weight"
    tied = next((n for n in sorted(names) if n.endswith(_WORD_EMBEDDINGS)), decoder)
    out["decoder.weight"] = decoder if decoder in names else tied
    bias = layout["bias"]
    # Older BERT checkpoints saved the decoder's bias under its own name too (a tied copy).
    if bias not in names and f"{layout['decoder']}.bias" in names:
        bias = f"{layout['decoder']}.bias"
    out["decoder.bias"] = bias
    return kind, out


def load_mlm_head(
    weights: Path, spec: MLMHeadSpec, config: BertConfig, device: torch.device
) -> MLMHead:
    """The MLM head of the checkpoint in ``weights`` (float32, on ``device``, eval mode).

    Raises:
        ValueError: a head tensor is missing (the folder was saved without its MLM head: a
            bare ``AutoModel``) or its shape does not fit ``config.json``.
    """
    from models.text.folders.weights import read_tensors

    tensors = read_tensors(weights, torch.device("cpu"))
    _, names = _names(spec.architecture, set(tensors))
    state = {}
    for ours, theirs in names.items():
        if theirs not in tensors:
            raise ValueError(
                f"model.safetensors lacks the masked-language-model head's {theirs!r} (a SPLADE "
                "model needs the ...ForMaskedLM checkpoint, not the bare encoder)"
            )
        state[ours] = tensors[theirs].float()
    head = MLMHead(spec, config.hidden_size, config.vocab_size, "norm.bias" in state)
    if "dense.bias" not in state:
        head.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
    try:
        head.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(f"the MLM head does not fit config.json: {detail}") from None
    return head.to(device).eval().requires_grad_(False)
