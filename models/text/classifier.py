"""``TextClassifier``: a cross-encoder (reranker) or sequence classifier from a user's folder,
with the attention backend chosen per call.

The encoder is the same :class:`~models.text.bert.BertEncoder` the sentence encoders run (one
loaded copy of the weights serves every backend); on top sits the architecture's own
classification head (:mod:`models.text.heads`). A reranker is a classifier with one logit:
``(query, document)`` pairs in, a relevance score out, as sentence-transformers'
``CrossEncoder.predict`` computes it (its activation; raw logits on request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from models.attention import BACKENDS, AttentionError, get_backend
from models.errors import ModelInputError
from models.precision import precision_of
from models.text import fused_linear, serial
from models.text.attention_check import ChecksTextAttention
from models.text.batching import plan_batches
from models.text.bert import BertEncoder, PackedBatch
from models.text.card import load_quality
from models.text.classifier_folder import ClassifierFolder, read_classifier_folder
from models.text.heads import ClassificationHead, load_head
from models.text.memory import forward_bytes, forward_work
from models.text.pairs import PairRow, PairTokenizer, TextOrPair
from models.text.weights import load_network

DEFAULT_ATTENTION = "flash"
PAD_MULTIPLE = 8


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


class TextClassifier(ChecksTextAttention):
    """Label logits (and scores) for texts or text pairs, with a per-call attention backend.

    Build with :meth:`from_folder`; then ``logits(classifier.tokenize(inputs), backend)``.

    Args:
        model: the encoder.
        head: the classification head on its states.
        tokenizer: texts and pairs to token ids with segments.
        folder: what the folder said (labels, activation, task).
        max_tokens: longest accepted input (both texts of a pair and special tokens together).
        name: the name it is served under.
        quality_file: measured quality per backend (``attnserve evaluate`` writes it).
    """

    default_attention: str = DEFAULT_ATTENTION

    def __init__(
        self,
        model: BertEncoder,
        head: ClassificationHead,
        tokenizer: PairTokenizer,
        folder: ClassifierFolder,
        max_tokens: int,
        *,
        name: str,
        quality_file: Path | None = None,
    ) -> None:
        self.model = model
        fused_linear.prepack(model)
        self.head = head
        self.tokenizer = tokenizer
        self.folder = folder
        self.labels = folder.labels
        self.activation = folder.activation  # CrossEncoder.predict's: the rerank scores
        self.label_activation = label_activation(folder)  # the label scores (TEI's /predict)
        self.task = folder.task
        self.max_tokens = max_tokens
        self.name = name
        self.quality_file = quality_file
        self.source = f"{folder.encoder.layout} folder"
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.precision = precision_of(self.dtype)

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        name: str | None = None,
        max_tokens: int | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        quality_file: Path | None = None,
    ) -> TextClassifier:
        """Load a cross-encoder or ``...ForSequenceClassification`` folder
        (:mod:`models.text.classifier_folder`).

        Raises:
            ValueError: what is wrong with the folder.
        """
        path = Path(folder)
        spec = read_classifier_folder(path)
        limit = spec.encoder.max_tokens if max_tokens is None else max_tokens
        target = torch.device(device)
        model = load_network(spec.encoder, target, dtype)
        head = load_head(spec.encoder.weights, spec.head, spec.encoder.config.hidden_size, target)
        tokenizer = PairTokenizer(
            spec.encoder.weights / "tokenizer.json", limit, spec.encoder.lowercase
        )
        return cls(
            model,
            head,
            tokenizer,
            spec,
            limit,
            name=name or path.name,
            quality_file=quality_file or path / "quality.json",
        )

    def with_precision(self, precision: str) -> TextClassifier:
        """This classifier with its encoder in ``precision`` (the head stays float32)."""
        from models.text.classifier_precision import in_precision

        return in_precision(self, precision)

    # ------------------------------------------------------------------ tokens

    def tokenize(
        self,
        inputs: Sequence[TextOrPair],
        truncate: bool = False,
        what: str = "input",
        cut_start: bool = False,
    ) -> list[PairRow]:
        """Token ids and segments per text or pair (:class:`PairTokenizer`); errors name an
        input as ``what`` ("document" for a reranker's request). ``cut_start``: truncation
        drops tokens from the start of the longer text rather than its end."""
        return self.tokenizer.pairs(inputs, truncate, what, cut_start)

    def _check_rows(self, rows: Sequence[PairRow]) -> None:
        vocab, segments = self.model.config.vocab_size, self.model.config.type_vocab_size
        for i, row in enumerate(rows):
            if not 1 <= len(row.ids) <= self.max_tokens or len(row.types) != len(row.ids):
                raise ModelInputError(
                    f"input {i} has {len(row.ids)} tokens; each input needs 1 to "
                    f"{self.max_tokens} tokens"
                )
            if any(not 0 <= t < vocab for t in row.ids):
                raise ModelInputError(f"input {i} holds a token id outside [0, {vocab})")
            if segments > 1 and any(not 0 <= s < segments for s in row.types):
                raise ModelInputError(f"input {i} holds a segment id outside [0, {segments})")

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def logits(
        self,
        rows: list[PairRow],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        max_batch_size: int = 32,
        validated: bool = False,
    ) -> Tensor:
        """Label logits ``[len(rows), labels]`` (float32, CPU) for tokenised inputs.

        Inputs are sorted by length into sub-batches of at most ``max_batch_size``, each padded
        to its own longest member, so every input gets the logits it would get alone (exact
        backends). ``validated``: backend, options and rows are already checked.

        Raises:
            ModelInputError: empty or over-long rows, ids outside the vocabulary.
            AttentionError: unknown backend or invalid options.
        """
        if not validated:
            self.check_attention(backend, options)
            self._check_rows(rows)
        chosen = dict(options or {})
        segments = self.folder.segments
        out = torch.empty(len(rows), len(self.labels), dtype=torch.float32)
        lengths = [len(row.ids) for row in rows]
        for sub in plan_batches(lengths, max(1, max_batch_size), None, PAD_MULTIPLE):
            members = [rows[i] for i in sub.indices]
            padded = len(members[0].ids) if len(members) == 1 else sub.padded_length
            batch = PackedBatch.from_lists(
                [r.ids for r in members],
                padded,
                self.device,
                [r.types for r in members] if segments else None,
            )
            # The head joins the forward's one-thread switch for a short pair (serial.py).
            with serial.threads_for(int(batch.input_ids.shape[0]), self.device):
                states = self.model(batch, backend, chosen)  # [t, c]
                out[list(sub.indices)] = self.head(states, batch.rows, batch.lengths).cpu()
        return out

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

    # ------------------------------------------------------------------ estimates

    def memory_estimate(
        self, backend: str, options: Mapping[str, Any] | None, rows: int, length: int
    ) -> int:
        """Estimated peak activation bytes of :meth:`logits` on ``rows`` inputs of up to
        ``length`` tokens in one sub-batch (:mod:`models.text.memory`)."""
        padded = -(-length // PAD_MULTIPLE) * PAD_MULTIPLE
        peak = forward_bytes(
            self.model.config,
            backend,
            options,
            rows,
            padded,
            self.dtype.itemsize,
            self.device.type,
        )
        return peak + rows * len(self.labels) * 4

    def work_estimate(
        self, backend: str, options: Mapping[str, Any] | None, rows: int, length: int
    ) -> float:
        """Flop-equivalents of one :meth:`logits` forward over ``rows`` inputs of ``length``."""
        padded = -(-length // PAD_MULTIPLE) * PAD_MULTIPLE
        return forward_work(self.model.config, backend, options, rows, padded)

    # ------------------------------------------------------------------ card

    def card(self) -> dict[str, Any]:
        """What ``GET /models`` shows: task, labels, limits, backends (and why any is refused)."""
        supported, unavailable = [], {}
        for backend in BACKENDS:
            try:
                self.check_attention(backend, None)
            except AttentionError as exc:
                unavailable[backend] = str(exc)
            else:
                supported.append(get_backend(backend).describe())
        config = self.model.config
        return {
            "name": self.name,
            "task": self.task,
            "source": self.source,
            "architecture": config.architecture,
            "layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size,
            "heads": config.num_attention_heads,
            "labels": list(self.labels),
            # What the model's own routes apply (rerank: CrossEncoder.predict's scores), and
            # what /predict and /v1/classify apply.
            "score_activation": self.activation if self.task == "rerank" else self.label_activation,
            "label_activation": self.label_activation,
            "classifier_pooling": self.folder.head.pooling,
            "max_tokens": self.max_tokens,
            "default_max_tokens": self.folder.encoder.max_tokens,
            "hard_max_tokens": config.max_tokens,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "default_attention": self.default_attention,
            "backends": supported,
            "unavailable_backends": unavailable,
            "quality": self.quality(),
        }

    def quality(self) -> dict[str, Any]:
        """Measured quality per backend (``quality.json``); {} when none was measured."""
        return load_quality(self.quality_file) if self.quality_file else {}
