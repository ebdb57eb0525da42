"""Read a cross-encoder or sequence-classifier folder: the encoder, its head, labels and scores.

Two layouts hold the same files:

- ``CrossEncoder.save`` (sentence-transformers 4+): ``modules.json`` with one ``Transformer``
  module whose ``sentence_bert_config.json`` says ``transformer_task: sequence-classification``,
  and the activation ``CrossEncoder.predict`` applies in ``config_sentence_transformers.json``
  (``activation_fn``); older versions wrote it into ``config.json`` (``sentence_transformers`` →
  ``activation_fn``, or ``sbert_ce_default_activation_function``);
- ``save_pretrained`` of a ``...ForSequenceClassification`` model plus its tokenizer.

Either way ``config.json`` names a ``...ForSequenceClassification`` architecture, its labels
(``id2label``) and ``problem_type``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.text.folders.embedding import (
    TextFolder,
    module_dir,
    read_json,
    read_optional_json,
    read_weights_folder,
    transformer_text_folder,
)
from models.text.network.architectures import ARCHITECTURES
from models.text.network.config import BertConfig
from models.text.network.heads import HeadSpec
from models.text.network.pooling import Pooling

# The activations ``CrossEncoder.predict`` may be saved with (torch classes by dotted path).
SCORE_ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.Softmax": "softmax",
}
_TASK_SUFFIX = "ForSequenceClassification"


@dataclass(frozen=True)
class ClassifierFolder:
    """What a folder says about its classifier.

    Attributes:
        encoder: the encoder part (as an embedding folder reads it; its pooling is unused).
        head: the classification head's settings.
        labels: label names in logit order (``id2label``).
        activation: what turns logits into scores by default: the cross-encoder's saved
            ``activation_fn``, else transformers' pipeline rule (sigmoid for one label or
            ``multi_label_classification``, softmax otherwise).
        cross_encoder: saved by sentence-transformers' ``CrossEncoder``.
        segments: the model reads each token's segment (0 first text, 1 second of a pair), as
            transformers does when the tokenizer hands it ``token_type_ids``.
        multi_label: ``config.json`` says ``problem_type: multi_label_classification`` (each
            label scored on its own, by a sigmoid).
    """

    encoder: TextFolder
    head: HeadSpec
    labels: tuple[str, ...]
    activation: str
    cross_encoder: bool
    segments: bool = False
    multi_label: bool = False

    @property
    def task(self) -> str:
        """``rerank`` for a one-logit model (a relevance score per pair), else ``classify``."""
        return "rerank" if len(self.labels) == 1 else "classify"


def _weights_path(path: Path) -> Path:
    """The folder holding ``config.json``: the folder itself, or its one Transformer module's."""
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return path
    modules = read_json(modules_file)
    if not isinstance(modules, list) or len(modules) != 1 or not isinstance(modules[0], dict):
        raise ValueError("modules.json of a cross-encoder must list exactly one Transformer module")
    return module_dir(path, modules[0])


def is_classifier_folder(path: Path) -> bool:
    """True when ``path`` holds a supported encoder saved for sequence classification."""
    try:
        raw = json.loads((_weights_path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(raw, dict) or raw.get("model_type") not in ARCHITECTURES:
        return False
    names = raw.get("architectures") or []
    return isinstance(names, list) and any(str(n).endswith(_TASK_SUFFIX) for n in names)


def _labels(raw: dict[str, Any]) -> tuple[str, ...]:
    given = raw.get("id2label")
    count = raw.get("num_labels")
    if isinstance(given, dict) and given:
        try:
            by_index = {int(k): str(v) for k, v in given.items()}
        except (TypeError, ValueError):
            raise ValueError("config.json id2label keys must be label indices") from None
        if sorted(by_index) != list(range(len(by_index))):
            raise ValueError("config.json id2label must number its labels 0..n-1")
        return tuple(by_index[i] for i in range(len(by_index)))
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return tuple(f"LABEL_{i}" for i in range(count))
    raise ValueError("config.json names no labels (id2label or num_labels)")


def score_activation(
    path: Path, weights: Path, raw: dict[str, Any], labels: int
) -> tuple[str, bool]:
    """The default score activation, and whether the folder is a sentence-transformers
    cross-encoder."""
    st_config = read_optional_json(path / "config_sentence_transformers.json")
    legacy = raw.get("sentence_transformers") or {}
    saved = (
        st_config.get("activation_fn")
        or (legacy.get("activation_fn") if isinstance(legacy, dict) else None)
        or raw.get("sbert_ce_default_activation_function")
    )
    cross_encoder = saved is not None or st_config.get("model_type") == "CrossEncoder"
    if saved is not None:
        if saved not in SCORE_ACTIVATIONS:
            raise ValueError(
                f"activation_fn {saved!r} is not supported; supported: "
                f"{', '.join(sorted(SCORE_ACTIVATIONS))}"
            )
        return SCORE_ACTIVATIONS[saved], True
    if cross_encoder:  # CrossEncoder's default when none was saved
        return ("sigmoid" if labels == 1 else "identity"), True
    multi = raw.get("problem_type") == "multi_label_classification"
    return ("sigmoid" if labels == 1 or multi else "softmax"), False


def _segments(weights: Path, config: BertConfig) -> bool:
    """Whether transformers would pass segment ids to the model: the tokenizer's
    ``model_input_names`` when saved; otherwise every tokenizer class but transformers 5's
    generic ``TokenizersBackend`` (whose default omits them) does, for a model with a segment
    table of more than one row."""
    if config.type_vocab_size < 2:
        return False
    tokenizer_config = read_optional_json(weights / "tokenizer_config.json")
    names = tokenizer_config.get("model_input_names")
    if isinstance(names, list):
        return "token_type_ids" in names
    return tokenizer_config.get("tokenizer_class") != "TokenizersBackend"


def read_classifier_folder(path: Path) -> ClassifierFolder:
    """Read ``path`` (either layout).

    Raises:
        ValueError: a missing file, an unsupported architecture, head or activation; the
            message says which (the caller names the folder).
    """
    weights, config = read_weights_folder(_weights_path(path))
    assert isinstance(config, BertConfig)  # our own encoders only (any_backbone is not set)
    raw = dict(read_json(weights / "config.json"))
    labels = _labels(raw)
    activation, cross_encoder = score_activation(path, weights, raw, len(labels))
    transformer = read_optional_json(weights / "sentence_bert_config.json")
    task = transformer.get("transformer_task", "sequence-classification")
    if task != "sequence-classification":
        raise ValueError(f"transformer_task {task!r} is not served (sequence-classification)")
    encoder = transformer_text_folder(
        path,
        weights,
        config,
        Pooling(("cls",)),
        transformer,
        layout="cross-encoder" if cross_encoder else "transformers",
    )
    head = HeadSpec.from_config(raw, config, len(labels))
    segments = _segments(weights, config)
    multi_label = raw.get("problem_type") == "multi_label_classification"
    return ClassifierFolder(encoder, head, labels, activation, cross_encoder, segments, multi_label)
