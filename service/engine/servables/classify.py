"""The rerank and classify tasks of a text servable
(:class:`~service.engine.servables.text.TextServable`): what a cross-encoder or sequence
classifier adds to checking, preparing and running texts or ``(query, document)`` pairs.

One servable answers both ``/rerank`` (a one-label model: a relevance score per document) and
``/predict`` (label scores per input): rows are tokenised pairs either way, so pairs of one
request and of concurrent requests share forward passes, and a query with many documents is
split by the batcher like any large request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from models.errors import ModelInputError
from models.quality_loss import classifier_losses
from models.text.classifier import TextClassifier, activate
from models.text.tokens.tokenizer import Token
from service.engine.batching.policy import length_bucket
from service.engine.servables.base import Call, Checked, ClassifyInput, OptionItems, Work


class Scores:
    """The rerank or classify task of a :class:`~models.text.classifier.TextClassifier`
    (which, its labels say: one label reranks).

    Args:
        classifier: the default precision's copy (tokenizer, labels, activations; all copies
            share them).
    """

    def __init__(self, classifier: TextClassifier) -> None:
        self.classifier = classifier
        self.task = classifier.task
        self.labels = classifier.labels

    # ------------------------------------------------------------------ per request

    def resolve(self, request: ClassifyInput) -> ClassifyInput:
        """Nothing to check before the texts: a classification request has no fields of its
        own that need the model."""
        return request

    def inputs(self, request: ClassifyInput) -> tuple[Sequence[str | tuple[str, str]], str]:
        """The texts or pairs, and how an error names one (``document`` for rerank)."""
        return request.inputs, request.what

    def call(
        self,
        backend: str,
        options: OptionItems,
        precision: str,
        request: ClassifyInput | None = None,
    ) -> Call:
        """The call at ``backend``'s ``options``: every request's rows share it (activations
        are applied after the forward pass)."""
        return Call(backend, options, precision=precision)

    def prepare(self, checked: Checked) -> Work:
        """Token ids and segments per input (or windows of long documents), and the
        activation that turns their logits into the answer."""
        request: ClassifyInput = checked.request
        if request.raw_scores:
            activation = "identity"
        elif request.ranking:  # CrossEncoder.predict's scores
            activation = self.classifier.activation
        else:  # label scores, as TEI's /predict: softmax over several labels
            activation = self.classifier.label_activation
        if request.windows:
            return self._prepare_windows(request, activation)
        rows = self.classifier.tokenize(
            list(request.inputs), request.truncate, request.what, request.cut_start
        )
        lengths = [len(row.ids) for row in rows]

        def finish(logits: list[list[float]]) -> list[list[float]]:
            return activate(torch.tensor(logits, dtype=torch.float32), activation).tolist()

        return Work(rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def over_token_cap(self, request: ClassifyInput, cap: int) -> int | None:
        """With windows: the documents' tokens counted when they hold more than ``cap`` while
        one leaves its pair over the limit, reading about ``cap`` tokens' worth of text
        (:mod:`models.text.tokens.token_cap`); None when within it, or without windows."""
        if not request.windows:
            return None
        tokenizer = self.classifier.tokenizer
        counted = tokenizer.count_documents_up_to(list(request.inputs), cap, request.what)
        return counted.tokens if counted.exceeded else None

    def _prepare_windows(self, request: ClassifyInput, activation: str) -> Work:
        """Pairs over the limit as windows of the document (all rows of one job, so they batch
        together); ``finish`` keeps each pair's best window (MaxP)."""
        pairs = [item for item in request.inputs if not isinstance(item, str)]
        if len(pairs) != len(request.inputs):
            raise ModelInputError("long_text windows applies to query-document pairs only")
        split = self.classifier.tokenizer.windows(pairs, request.what)
        lengths = [len(row.ids) for row in split.rows]

        def finish(logits: list[list[float]]) -> list[list[float]]:
            scores = activate(torch.tensor(logits, dtype=torch.float32), activation)
            best = torch.full((len(pairs), scores.shape[1]), float("-inf"))
            owners = torch.tensor(split.owners)[:, None].expand_as(scores)
            return best.scatter_reduce(0, owners, scores, reduce="amax").tolist()

        return Work(split.rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def run(self, classifier: TextClassifier, rows: list[Any], call: Call) -> list[Any]:
        """``classifier``'s logits of ``rows``, as lists (activated in the job's finish)."""
        logits = classifier.logits(
            rows, call.backend, call.options_dict, max_batch_size=len(rows), validated=True
        )
        return logits.tolist()

    def card(self) -> dict[str, Any]:
        """Nothing: the classifier's own card says it all."""
        return {}

    # ------------------------------------------------------------------ operations

    def output_bytes(self, call: Call, rows: int, length: int) -> int:
        """Nothing beyond the model's estimate (which counts the logits)."""
        return 0

    def losses(
        self, quality: Mapping[str, Any], length: int, precision: str
    ) -> dict[str, tuple[float, dict[str, Any]]]:
        """Each backend's measured loss for inputs of ``length`` tokens, with its options."""
        return classifier_losses(quality, length, precision)

    def sample_rows(self, document: str, count: int, tokens: int) -> list[Any]:
        """``count`` pairs of a short query and ``document``, cut to ``tokens`` (a calibration
        batch)."""
        query = "what does the quick brown fox do"
        rows = self.classifier.tokenize([(query, document)] * count, truncate=True)
        return [type(r)(r.ids[:tokens], r.types[:tokens]) for r in rows]

    def warmup_rows(self, backend: str) -> list[list[Any]]:
        """One small batch of pairs."""
        pairs = [
            ("warm-up", "a document"),
            ("a slightly longer query", "to warm up padded batches"),
        ]
        # Truncated: a short max_seq_length (or a long default prompt) must not stop start-up.
        return [self.classifier.tokenize(pairs, truncate=True)]

    def compile(
        self, backends: list[str], copies: list[TextClassifier], mode: str, compiler: str
    ) -> None:
        """Classifiers run eager: ``torch.compile`` is not wired for them yet (the setting
        applies to sentence encoders and forecasters)."""

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        """Every token of each text (TEI's ``/tokenize``); a classifier has no prompts."""
        if prompt_name is not None:
            raise ModelInputError(
                f"prompt_name {prompt_name!r}: {self.classifier.name} has no prompts (only "
                "sentence encoders do); drop prompt_name"
            )
        return self.classifier.tokenizer.tokens(texts, add_special_tokens)
