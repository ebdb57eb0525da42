"""A cross-encoder or sequence classifier as a served model: texts or ``(query, document)`` pairs
checked, tokenised up front with their segments, scored in the batches the worker forms.

One servable answers both ``/rerank`` (a one-label model: a relevance score per document) and
``/predict`` (label scores per input): rows are tokenised pairs either way, so pairs of one
request and of concurrent requests share forward passes, and a query with many documents is
split by the batcher like any large request.
"""

from __future__ import annotations

from typing import Any

import torch

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION
from models.quality_loss import classifier_losses
from models.text.classifier import TextClassifier, activate
from models.text.tokenizer import Token
from service.engine.batching.policy import length_bucket
from service.engine.servables.backends import accepted_backends, measured_losses, served_card
from service.engine.servables.base import (
    INLINE_TOKENIZE_CHARS,
    Call,
    Checked,
    ClassifyInput,
    Work,
    check_precision,
    option_items,
)

CALIBRATION_TOKENS = 128


class ClassifierServable:
    """Wraps a :class:`~models.text.classifier.TextClassifier`, in one or more precisions.

    Args:
        classifier: the loaded float32 classifier.
        aliases: other names clients may use for it.
        precisions: the precisions to serve, the default first.
    """

    def __init__(
        self,
        classifier: TextClassifier,
        aliases: tuple[str, ...] = (),
        precisions: tuple[str, ...] = (DEFAULT_PRECISION,),
    ) -> None:
        self.models = {p: classifier.with_precision(p) for p in precisions}
        self.model = self.models[precisions[0]]
        self.name = classifier.name
        self.task = classifier.task
        self.aliases = aliases
        self.default_attention = classifier.default_attention
        self.labels = classifier.labels
        self.max_tokens = classifier.max_tokens
        accepted = [accepted_backends(m.check_attention) for m in self.models.values()]
        self._backends = [b for b in accepted[0] if all(b in a for a in accepted)]
        self._quality = classifier.quality()
        self._losses: dict[int, dict[Call, float]] = {}

    # ------------------------------------------------------------------ per request

    def check(self, request: ClassifyInput) -> Checked:
        """Backend, options, precision and empty texts; token limits come with tokenising."""
        for i, item in enumerate(request.inputs):
            parts = [item] if isinstance(item, str) else list(item)
            if any(isinstance(p, str) and not p.strip() for p in parts):
                raise _input_error(request.what, i)
        precision = check_precision(request.precision, list(self.models), self.name)
        backend = request.attention or self.default_attention
        options = self.models[precision].check_attention(backend, request.attention_options)
        call = Call(backend, option_items(options), precision=precision)
        chars = sum(
            len(p) for item in request.inputs for p in ([item] if isinstance(item, str) else item)
        )
        return Checked(call, request, chars <= INLINE_TOKENIZE_CHARS)

    def prepare(self, checked: Checked) -> Work:
        request: ClassifyInput = checked.request
        if request.raw_scores:
            activation = "identity"
        elif request.ranking:  # CrossEncoder.predict's scores
            activation = self.model.activation
        else:  # label scores, as TEI's /predict: softmax over several labels
            activation = self.model.label_activation
        if request.windows:
            return self._prepare_windows(request, activation, checked.token_cap)
        rows = self.model.tokenize(
            list(request.inputs), request.truncate, request.what, request.cut_start
        )
        lengths = [len(row.ids) for row in rows]

        def finish(logits: list[list[float]]) -> list[list[float]]:
            return activate(torch.tensor(logits, dtype=torch.float32), activation).tolist()

        return Work(rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def _prepare_windows(
        self, request: ClassifyInput, activation: str, token_cap: int | None = None
    ) -> Work:
        """Pairs over the limit as windows of the document (all rows of one job, so they batch
        together); ``finish`` keeps each pair's best window (MaxP). ``token_cap``: the engine's
        bound from the compute budget, so an over-budget request stops tokenising early."""
        pairs = [item for item in request.inputs if not isinstance(item, str)]
        if len(pairs) != len(request.inputs):
            raise _windows_error()
        split = self.model.tokenizer.windows(pairs, request.what, token_cap)
        lengths = [len(row.ids) for row in split.rows]

        def finish(logits: list[list[float]]) -> list[list[float]]:
            scores = activate(torch.tensor(logits, dtype=torch.float32), activation)
            best = torch.full((len(pairs), scores.shape[1]), float("-inf"))
            owners = torch.tensor(split.owners)[:, None].expand_as(scores)
            return best.scatter_reduce(0, owners, scores, reduce="amax").tolist()

        return Work(split.rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def run(self, rows: list[Any], call: Call) -> list[Any]:
        logits = self.models[call.precision].logits(
            rows, call.backend, call.options_dict, max_batch_size=len(rows), validated=True
        )
        return logits.tolist()

    def card(self) -> dict[str, Any]:
        card = served_card(self.model.card(), self.aliases, self.backends())
        card["precisions"] = self.precisions()
        card["default_precision"] = self.precisions()[0]
        return card

    # ------------------------------------------------------------------ operations

    def backends(self) -> list[str]:
        return list(self._backends)

    def precisions(self) -> list[str]:
        return list(self.models)

    def default_call(self, backend: str, precision: str | None = None) -> Call:
        options = option_items(self.model.check_attention(backend, None))
        return Call(backend, options, precision=precision or self.precisions()[0])

    def memory_estimate(self, call: Call, rows: int, length: int) -> int:
        return self.models[call.precision].memory_estimate(
            call.backend, call.options_dict, rows, length, None, max_batch_size=rows
        )

    def work_estimate(self, call: Call, rows: int, length: int) -> float:
        return self.model.work_estimate(call.backend, call.options_dict, rows, length)

    def quality_losses(self, length: int) -> dict[Call, float]:
        losses = self._losses.get(length)
        if losses is None:
            losses = self._losses[length] = measured_losses(
                lambda precision: classifier_losses(self._quality, length, precision),
                self.models,
                self._backends,
                self._measured_call,
            )
        return losses

    def measured_variants(self, backend: str) -> list[Call]:
        if backend not in self._backends:
            return []
        return [self.default_call(backend, p) for p in self.precisions()[1:]]

    def _measured_call(self, backend: str, options: dict[str, Any], precision: str) -> Call:
        given = {k: v for k, v in options.items() if v is not None}
        items = option_items(self.model.check_attention(backend, given))
        return Call(backend, items, precision=precision)

    def calibration_batch(self, backend: str) -> tuple[list[Any], Call, int]:
        query = "what does the quick brown fox do"
        document = "the quick brown fox jumps over the lazy dog " * 16
        rows = self.model.tokenize([(query, document)] * 4, truncate=True)
        rows = [type(r)(r.ids[:CALIBRATION_TOKENS], r.types[:CALIBRATION_TOKENS]) for r in rows]
        return rows, self.default_call(backend), max(map(len, rows))

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        """Every token of each text (TEI's ``/tokenize``); a classifier has no prompts."""
        if prompt_name is not None:
            raise ModelInputError(
                f"prompt_name {prompt_name!r}: {self.name} has no prompts (only sentence "
                "encoders do); drop prompt_name"
            )
        return self.model.tokenizer.tokens(texts, add_special_tokens)

    def decode(self, ids: list[list[int]], skip_special_tokens: bool) -> list[str]:
        """The text of each list of token ids (TEI's ``/decode``)."""
        return self.model.tokenizer.decode(ids, skip_special_tokens)

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], Call]]:
        rows = self.model.tokenize(
            [("warm-up", "a document"), ("a slightly longer query", "to warm up padded batches")]
        )
        return [(rows, self.default_call(backend))]

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        """Classifiers run eager: ``torch.compile`` is not wired for them yet (the setting
        applies to sentence encoders and forecasters)."""


def _windows_error() -> Exception:
    from models.errors import ModelInputError

    return ModelInputError("long_text windows applies to query-document pairs only")


def _input_error(what: str, index: int) -> Exception:
    from models.errors import ModelInputError

    return ModelInputError(f"{what} {index} is empty; every {what} needs some text")
