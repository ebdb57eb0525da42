"""``TextClassifier``: a cross-encoder (reranker) or sequence classifier from a user's folder,
with the attention backend chosen per call.

The encoder is the same :class:`~models.text.network.bert.BertEncoder` the sentence encoders run (one
loaded copy of the weights serves every backend); on top sits the architecture's own
classification head (:mod:`models.text.network.heads`). A reranker is a classifier with one logit:
``(query, document)`` pairs in, a relevance score out, as sentence-transformers'
``CrossEncoder.predict`` computes it (its activation; raw logits on request).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import models.text.network.serial as serial
from models.text.base import DEFAULT_ATTENTION, MAX_BATCH_SIZE, TextModel
from models.text.folders.classifier import ClassifierFolder, read_classifier_folder
from models.text.folders.embedding import TextFolder
from models.text.network.bert import BertEncoder, PackedBatch
from models.text.network.heads import ClassificationHead, load_head
from models.text.tokens.pairs import PairRow, PairTokenizer, TextOrPair

# Calibration pairs per word-count bin of the shipped corpus for int8 (as the sentence
# encoders' INT8_CALIBRATION_PER_BIN): each text paired with one from the other end.
INT8_CALIBRATION_PER_BIN = 8


def activate(logits: Tensor, activation: str) -> Tensor:
    """Scores from ``[n, labels]`` logits: ``sigmoid``, ``softmax`` (over labels), ``tanh`` or
    ``identity`` (the raw logits)."""
    if activation == "sigmoid":
        return torch.sigmoid(logits)
    if activation == "softmax":
        return torch.softmax(logits, dim=-1)
    if activation == "tanh":
        return torch.tanh(logits)
    return logits


def label_activation(folder: ClassifierFolder) -> str:
    """What turns logits into label scores (``/predict``, ``/v1/classify``), as
    text-embeddings-inference's ``/predict`` and transformers' text-classification pipeline do:
    a sigmoid for one label, softmax over several. Several labels get a sigmoid each when the
    labels are independent: ``problem_type: multi_label_classification`` (the pipeline's rule)
    or a cross-encoder saved with a ``Sigmoid`` activation. A cross-encoder's other saved
    activations (``Identity``, which ``CrossEncoder.save`` writes for several labels; ``Tanh``)
    are scores, not label probabilities: they stay with :attr:`TextClassifier.activation`,
    what ``CrossEncoder.predict`` and the rerank routes give."""
    if len(folder.labels) == 1:
        return "sigmoid"
    if folder.multi_label or (folder.cross_encoder and folder.activation == "sigmoid"):
        return "sigmoid"
    return "softmax"


class TextClassifier(TextModel):
    """Label logits (and scores) for texts or text pairs, with a per-call attention backend: a
    :class:`TextModel` whose head is the architecture's classification head (float32).

    Build with :meth:`from_folder` (a cross-encoder or ``...ForSequenceClassification``
    folder, :mod:`models.text.folders.classifier`); then
    ``logits(classifier.tokenize(inputs), backend)``.

    Args:
        model: the encoder.
        head: the classification head on its states.
        tokenizer: texts and pairs to token ids with segments.
        folder: what the folder said (labels, activation, task).
        max_tokens: longest accepted input (both texts of a pair and special tokens together).
        name: the name it is served under.
        quality_file: measured quality per backend (``attnserve evaluate`` writes it).
        precision: the precision ``model`` was converted to (:class:`TextModel`).
    """

    tokenizer: PairTokenizer
    tokenizer_class = PairTokenizer

    def __init__(
        self,
        model: BertEncoder,
        head: ClassificationHead,
        tokenizer: PairTokenizer,
        folder: ClassifierFolder,
        max_tokens: int,
        *,
        name: str,
        precision: str | None = None,
        quality_file: Path | None = None,
    ) -> None:
        super().__init__(
            model,
            tokenizer,
            max_tokens,
            # What the folder says: the task (rerank or classify), its layout and its limit.
            task=folder.task,
            source=f"{folder.encoder.layout} folder",
            default_max_tokens=folder.encoder.max_tokens,
            name=name,
            quality_file=quality_file,
            precision=precision,
        )
        self.head = head
        self.folder = folder
        self.labels = folder.labels
        self.activation = folder.activation  # CrossEncoder.predict's: the rerank scores
        self.label_activation = label_activation(folder)  # the label scores (TEI's /predict)

    @classmethod
    def _read_folder(cls, path: Path) -> tuple[TextFolder, ClassifierFolder]:
        """A cross-encoder or ``...ForSequenceClassification`` folder
        (:func:`read_classifier_folder`)."""
        spec = read_classifier_folder(path)
        return spec.encoder, spec

    @classmethod
    def _from_parts(
        cls,
        path: Path,
        spec: ClassifierFolder,
        network: BertEncoder,
        tokenizer: PairTokenizer,  # type: ignore[override]  # built from tokenizer_class
        limit: int,
        name: str,
        quality_file: Path,
    ) -> TextClassifier:
        hidden, device = spec.encoder.config.hidden_size, next(network.parameters()).device
        head = load_head(spec.encoder.weights, spec.head, hidden, device)
        return cls(network, head, tokenizer, spec, limit, name=name, quality_file=quality_file)

    def _calibrate(self, network: BertEncoder) -> None:
        """Score :data:`INT8_CALIBRATION_PER_BIN` pairs of shipped texts per length band with
        ``network``."""
        from models.text.quality.corpus import length_spread

        texts = length_spread(INT8_CALIBRATION_PER_BIN)
        pairs = [(texts[i], texts[-1 - i]) for i in range(len(texts))]
        twin = self._with_network(network, self.precision)
        twin.logits(twin.tokenize(pairs, truncate=True), self.calibration_backend)

    # ------------------------------------------------------------------ tokens

    def tokenize(
        self,
        inputs: Sequence[TextOrPair],
        truncate: bool = False,
        what: str = "input",
        cut_start: bool = False,
    ) -> list[PairRow]:
        """Token ids and segments per text or pair (:meth:`PairTokenizer.pairs`); errors name
        an input as ``what`` ("document" for a reranker's request). ``cut_start``: truncation
        drops tokens from the start of the longer text rather than its end."""
        return self.tokenizer.pairs(inputs, truncate, what, cut_start)

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def logits(
        self,
        rows: list[PairRow],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        max_batch_size: int = MAX_BATCH_SIZE,
        validated: bool = False,
    ) -> Tensor:
        """Label logits ``[len(rows), labels]`` (float32, CPU) for tokenised inputs.

        Inputs are sorted by length into sub-batches of at most ``max_batch_size``, each padded
        to its own longest member, so every input gets the logits it would get alone (exact
        backends; :meth:`TextModel._run`). ``validated``: backend, options and rows are
        already checked.

        Raises:
            ModelInputError: empty or over-long rows, ids outside the vocabulary.
            AttentionError: unknown backend or invalid options.
        """
        ids, types = [row.ids for row in rows], [row.types for row in rows]
        if not validated:
            self._check_inputs(ids, backend, options, types)
        chosen = dict(options or {})

        def classify(batch: PackedBatch) -> Tensor:  # the head: [b, labels]
            # The head joins the forward's one-thread switch for a short pair (serial.py).
            with serial.threads_for(int(batch.input_ids.shape[0]), self.device):
                states = self.model(batch, backend, chosen)  # [t, c]
                return self.head(states, batch.rows, batch.lengths)

        segments = types if self.folder.segments else None
        return self._run(ids, len(self.labels), classify, max_batch_size, None, segments)

    def scores(self, logits: Tensor, raw: bool = False) -> Tensor:
        """Scores from :meth:`logits`: the model's activation, or the logits when ``raw``."""
        return logits if raw else activate(logits, self.activation)

    def predict(
        self,
        inputs: Sequence[TextOrPair],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        truncate: bool = False,
        raw: bool = False,
    ) -> Tensor:
        """``tokenize`` then ``logits`` then ``scores``: ``[len(inputs), labels]``."""
        self.check_attention(backend, options)
        return self.scores(self.logits(self.tokenize(inputs, truncate), backend, options), raw)

    @property
    def output_width(self) -> int:
        """Floats per input :meth:`logits` returns: one per label."""
        return len(self.labels)

    # ------------------------------------------------------------------ card

    def _head_card(self) -> dict[str, Any]:
        """Labels, what turns logits into scores, and the head's pooling."""
        return {
            "labels": list(self.labels),
            # What the model's own routes apply (rerank: CrossEncoder.predict's scores), and
            # what /predict and /v1/classify apply.
            "score_activation": self.activation if self.task == "rerank" else self.label_activation,
            "label_activation": self.label_activation,
            "classifier_pooling": self.folder.head.pooling,
        }
