"""Sequence-classification heads: the layers transformers' ``...ForSequenceClassification`` puts on
top of the encoder, one per architecture, turning token states into label logits.

What each architecture does (its ``modeling_*.py`` in transformers), on the first token's state
unless said otherwise:

=============  ==========================================================================
``bert``       ``tanh(pooler.dense(x))`` then ``classifier`` (Devlin et al. 2019, sec. 3)
``roberta``    ``tanh(classifier.dense(x))`` then ``classifier.out_proj`` (also XLM-R,
               CamemBERT and MPNet, whose head is a copy of RoBERTa's)
``distilbert`` ``relu(pre_classifier(x))`` then ``classifier``
``modernbert`` ``head.norm(act(head.dense(x)))`` then ``classifier``; ``x`` is the first
               token or the mean of all tokens (``classifier_pooling``)
=============  ==========================================================================

Dropout is the identity at inference and left out. The head runs in float32 whatever the
encoder's precision: it is a few hundred multiply-adds per text, and the scores are what a
client compares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.text.network.config import BertConfig

# The head's tensors per architecture: our name -> the checkpoint's.
_TENSORS: dict[str, dict[str, str]] = {
    "bert": {"dense": "bert.pooler.dense", "out": "classifier"},
    "roberta": {"dense": "classifier.dense", "out": "classifier.out_proj"},
    "distilbert": {"dense": "pre_classifier", "out": "classifier"},
    "modernbert": {"dense": "head.dense", "norm": "head.norm", "out": "classifier"},
}
_FAMILY = {"xlm-roberta": "roberta", "camembert": "roberta", "mpnet": "roberta"}
# Where a task model's encoder sits: a BERT checkpoint's pooler is ``bert.pooler``.
_BERT_POOLER_PREFIXES = ("bert.pooler.", "pooler.")
_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "tanh": torch.tanh,
}


def family(architecture: str) -> str:
    """Which head layout ``architecture`` uses (a key of the table above)."""
    return _FAMILY.get(architecture, architecture)


@dataclass(frozen=True)
class HeadSpec:
    """What ``config.json`` says about the head.

    Attributes:
        architecture: the encoder's ``model_type`` (chooses the layout).
        num_labels: logits per text.
        pooling: ``cls`` (first token) or ``mean`` (ModernBERT's ``classifier_pooling``).
        activation: ModernBERT's ``classifier_activation``.
        norm_eps: ModernBERT's head LayerNorm epsilon.
    """

    architecture: str
    num_labels: int
    pooling: str = "cls"
    activation: str = "gelu"
    norm_eps: float = 1e-5

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], config: BertConfig, num_labels: int) -> HeadSpec:
        """Read the head's settings from a transformers ``config.json`` (as a dict).

        Raises:
            ValueError: a pooling or activation the head does not implement.
        """
        pooling = str(raw.get("classifier_pooling", "cls"))
        activation = str(raw.get("classifier_activation", "gelu"))
        if pooling not in ("cls", "mean"):
            raise ValueError(f"classifier_pooling {pooling!r} is not supported (cls or mean)")
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"classifier_activation {activation!r} is not supported; supported: "
                f"{', '.join(_ACTIVATIONS)}"
            )
        return cls(config.architecture, num_labels, pooling, activation, config.layer_norm_eps)


class ClassificationHead(nn.Module):
    """``[t, c]`` packed token states -> ``[b, num_labels]`` float32 logits."""

    def __init__(self, spec: HeadSpec, hidden: int, dense_bias: bool, norm_bias: bool) -> None:
        super().__init__()
        self.spec = spec
        self.kind = family(spec.architecture)
        self.dense = nn.Linear(hidden, hidden, bias=dense_bias)
        self.norm = (
            nn.LayerNorm(hidden, eps=spec.norm_eps, bias=norm_bias)
            if self.kind == "modernbert"
            else None
        )
        self.out = nn.Linear(hidden, spec.num_labels)

    def forward(self, states: Tensor, rows: Tensor, lengths: Tensor) -> Tensor:
        """Logits per text from ``states`` ``[t, c]``; ``rows`` ``[t]`` names each token's text,
        ``lengths`` ``[b]`` the tokens per text."""
        states = states.float()
        if self.spec.pooling == "mean":
            summed = states.new_zeros(lengths.shape[0], states.shape[-1]).index_add_(
                0, rows, states
            )
            x = summed / lengths[:, None].to(states.dtype)
        else:
            x = states[torch.cumsum(lengths, 0) - lengths]  # each text's first token
        x = self.dense(x)
        if self.kind == "bert" or self.kind == "roberta":
            x = torch.tanh(x)
        elif self.kind == "distilbert":
            x = F.relu(x)
        else:
            assert self.norm is not None
            x = self.norm(_ACTIVATIONS[self.spec.activation](x))
        return self.out(x)


def _find(tensors: Mapping[str, Tensor], name: str) -> Tensor:
    try:
        return tensors[name]
    except KeyError:
        raise ValueError(f"model.safetensors lacks the classification head's {name!r}") from None


def head_tensor_names(architecture: str, names: list[str]) -> dict[str, str]:
    """The checkpoint's name of each head tensor we need (``dense.weight`` -> ``classifier.dense.weight``...)."""
    layout = dict(_TENSORS[family(architecture)])
    if layout["dense"] == "bert.pooler.dense":
        # A bare BertModel's pooler has no ``bert.`` prefix; a task model's has.
        layout["dense"] = next(
            (p + "dense" for p in _BERT_POOLER_PREFIXES if p + "dense.weight" in names),
            "bert.pooler.dense",
        )
    out = {}
    for ours, theirs in layout.items():
        for part in ("weight", "bias"):
            if part == "bias" and f"{theirs}.bias" not in names and ours != "out":
                continue  # ModernBERT's dense and norm may have no bias (classifier_bias)
            out[f"{ours}.{part}"] = f"{theirs}.{part}"
    return out


def load_head(
    weights: Path, spec: HeadSpec, hidden: int, device: torch.device
) -> ClassificationHead:
    """The head of ``spec`` with its tensors from the folder's ``model.safetensors`` (or shards).

    Raises:
        ValueError: a head tensor is missing or its shape does not fit ``config.json``.
    """
    from models.text.folders.weights import read_tensors

    tensors = read_tensors(weights, torch.device("cpu"))
    names = head_tensor_names(spec.architecture, list(tensors))
    state = {ours: _find(tensors, theirs).float() for ours, theirs in names.items()}
    head = ClassificationHead(spec, hidden, "dense.bias" in state, "norm.bias" in state)
    if head.norm is None:
        state = {k: v for k, v in state.items() if not k.startswith("norm.")}
    got = state["out.weight"].shape[0]
    if got != spec.num_labels:
        raise ValueError(
            f"the classifier has {got} outputs, config.json names {spec.num_labels} labels"
        )
    try:
        head.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(f"the classification head does not fit config.json: {detail}") from None
    return head.to(device).eval().requires_grad_(False)
