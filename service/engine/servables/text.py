"""A text model as a served model, whatever its task: a sentence encoder (``encode``: the
shipped MiniLM or any supported model folder) or a cross-encoder / sequence classifier
(``rerank``, ``classify``).

Both tokenize up front and run in the batches the worker forms (one forward pass per batch: no
split inside the model), in one or more precisions, with the same checks of backend, options,
precision and empty texts, the same estimates, quality figures, calibration and warm-up. What
the task adds (the request's own fields, how rows are prepared and run, the card's extras) is
its head: :class:`~service.engine.servables.embed.Embeddings` or
:class:`~service.engine.servables.classify.Scores`.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION
from models.quality_file import backends_of
from models.text import SentenceEncoder
from models.text.classifier import TextClassifier
from models.text.tokens.tokenizer import Token
from service.engine.servables.base import (
    INLINE_TOKENIZE_CHARS,
    Call,
    Checked,
    OptionItems,
    Work,
    check_precision,
    option_items,
)
from service.engine.servables.classify import Scores
from service.engine.servables.embed import Embeddings, calibrate
from service.engine.servables.servable import Servable, accepted_backends

# The batch timed at start-up to measure each backend's work rate: four rows of 128 tokens, long
# enough that fixed overhead does not dominate, short enough that timing every backend adds
# little to start-up.
CALIBRATION_ROWS = 4
CALIBRATION_TOKENS = 128
CALIBRATION_DOCUMENT = "the quick brown fox jumps over the lazy dog " * 16


# Characters of a text the event loop looks at to tell whether it holds any token.
GLANCE_CHARS = 1024


def _has_tokens(text: str) -> bool:
    """Whether ``text`` holds a letter, digit, mark, punctuation or symbol (which every
    tokenizer we load keeps as, or within, a token)."""
    return any(unicodedata.category(c)[0] in "LMNPS" for c in text)


def _empty(
    request: Any, what: str, i: int, j: int, parts: tuple[Any, ...], model: str
) -> ModelInputError:
    """The refusal of part ``j`` of input ``i``: it holds no tokens."""
    # A ranked pair is (query, document): its empty query is named as such.
    ranked = getattr(request, "ranking", False) and len(parts) == 2
    name = "the query" if ranked and j == 0 else f"{what} {i}"
    if not ranked and len(parts) == 2:
        name = f"{what} {i}'s {('first', 'second')[j]} text"
    return ModelInputError(
        f"{name} is empty: it holds no tokens for {model} (nothing but whitespace, or "
        f"characters its tokenizer drops: control, format, zero-width, private-use); send "
        f"some text in {name}"
    )


class TextServable(Servable):
    """Wraps a :class:`~models.text.SentenceEncoder` or a
    :class:`~models.text.classifier.TextClassifier`, in one or more precisions.

    Args:
        model: the loaded model (float32 when ``precisions`` lists more than its own).
        aliases: other names clients may use for it (e.g. the sentence-transformers hub id).
        precisions: the precisions to serve, the default first (:mod:`models.precision`); each
            is a converted copy of ``model``'s weights, sharing its tokenizer.
    """

    def __init__(
        self,
        model: SentenceEncoder | TextClassifier,
        aliases: tuple[str, ...] = (),
        precisions: tuple[str, ...] = (DEFAULT_PRECISION,),
    ) -> None:
        models = {p: model.with_precision(p) for p in precisions}
        # A backend is served when every loaded precision can run it, so warm-up and "auto"
        # never meet a backend that one copy of the weights refuses.
        accepted = [accepted_backends(m.check_attention) for m in models.values()]
        super().__init__(models, aliases, [b for b in accepted[0] if all(b in a for a in accepted)])
        self.head: Embeddings | Scores = self._make_head(model)
        self.task = self.head.task
        self.labels: tuple[str, ...] = tuple(self.head.labels)
        self.max_tokens: int = model.max_tokens
        self._quality = model.quality()
        self._losses: dict[int, dict[Call, float]] = {}

    def _make_head(self, model: SentenceEncoder | TextClassifier) -> Embeddings | Scores:
        """The task's head (a subclass serving another kind of text model overrides it)."""
        if isinstance(model, SentenceEncoder):
            return Embeddings(self.model, calibrate(model, self._backends))
        return Scores(self.model)

    # ------------------------------------------------------------------ per request

    def check(self, request: Any) -> Checked:
        """The task's own fields, empty texts, precision, backend and options; token limits
        come with tokenizing."""
        request = self.head.resolve(request)
        items, what = self.head.inputs(request)
        chars, doubtful = 0, False
        for i, item in enumerate(items):
            parts = (item,) if isinstance(item, str) else item
            for j, part in enumerate(parts):
                if not isinstance(part, str):
                    continue
                verdict = self._tokenless_at_a_glance(part)
                if verdict:
                    raise _empty(request, what, i, j, parts, self.name)
                doubtful = doubtful or verdict is None
            chars += sum(map(len, parts))
        precision = check_precision(request.precision, self.precisions(), self.name)
        backend = request.attention or self.default_attention
        options = self.models[precision].check_attention(backend, request.attention_options)
        call = self.head.call(backend, option_items(options), precision, request)
        # A doubtful text is judged in prepare, which then runs in a thread.
        inline = chars <= INLINE_TOKENIZE_CHARS and not doubtful
        return Checked(call, request, inline, {"doubtful": True} if doubtful else {})

    def attention_fallback(self, call: Call) -> str | None:
        """Which layers ran exact attention instead of ``call``'s backend, and why (a
        transformers backbone's causal layers under a backend with no causal form); None when
        every layer ran it."""
        return self.models[call.precision].attention_fallback(call.backend, dict(call.options))

    def _tokenless_at_a_glance(self, text: str) -> bool | None:
        """Whether ``text`` has no tokens of its own for this model (the documented rule: such
        a text is refused as "" is), judged on the event loop from at most
        :data:`GLANCE_CHARS` characters: None when those cannot tell (a long run of characters
        tokenizers drop), for :meth:`_tokenless` to judge off the loop. Only a text without a
        letter, digit, mark, punctuation or symbol can be tokenless."""
        stripped = text.strip()  # C speed, whatever the length
        if not stripped:
            return True
        if _has_tokens(stripped[:GLANCE_CHARS]):
            return False
        if len(stripped) > GLANCE_CHARS:
            return None
        return self._tokenless(stripped)

    def _tokenless(self, text: str) -> bool:
        """Whether ``text`` (made only of characters without a letter, digit, mark, punctuation
        or symbol in its first :data:`GLANCE_CHARS`) holds no tokens: the tokenizer decides."""
        if _has_tokens(text):
            return False
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # an unpaired surrogate: tokenizing refuses it by name
            return False
        tokenizer = self.model.tokenizer
        return tokenizer.count([text])[0] <= tokenizer.special_tokens()

    def _refuse_doubtful(self, checked: Checked) -> None:
        """The empty-text refusal of a text :meth:`check` could not judge at a glance."""
        if checked.detail.get("doubtful"):
            items, what = self.head.inputs(checked.request)
            for i, item in enumerate(items):
                parts = (item,) if isinstance(item, str) else item
                for j, part in enumerate(parts):
                    if isinstance(part, str) and self._tokenless(part.strip()):
                        raise _empty(checked.request, what, i, j, parts, self.name)

    def over_token_cap(self, checked: Checked, cap: int) -> int | None:
        # An empty text is refused as such first, as it was when prepare counted.
        self._refuse_doubtful(checked)
        return self.head.over_token_cap(checked.request, cap)

    def prepare(self, checked: Checked) -> Work:
        self._refuse_doubtful(checked)
        return self.head.prepare(checked)

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        return self.head.run(self.models[call.precision], rows, call)

    def card(self) -> dict[str, Any]:
        return {**super().card(), **self.head.card()}

    # ------------------------------------------------------------------ operations

    def call(self, backend: str, options: OptionItems, precision: str) -> Call:
        return self.head.call(backend, options, precision)

    def memory_estimate(self, call: Any, rows: int, length: int) -> int:
        # One forward pass over exactly these rows, as run makes it (max_batch_size=rows).
        model = self.models[call.precision]
        peak = model.memory_estimate(
            call.backend, call.options_dict, rows, length, None, max_batch_size=rows
        )
        return peak + self.head.output_bytes(call, rows, length)

    def work_estimate(self, call: Call, rows: int, length: int) -> float:
        return self.model.work_estimate(call.backend, call.options_dict, rows, length)

    def quality_losses(self, length: int) -> dict[Call, float]:
        # The figures do not change while serving: worked out once per length (at most
        # max_tokens of them), then asked per auto request.
        losses = self._losses.get(length)
        if losses is None:
            losses = self._losses[length] = {
                self.measured_call(backend, options, precision): loss
                for precision in self.models
                for backend, (loss, options) in self.head.losses(
                    self._quality, length, precision
                ).items()
                if backend in self._backends
            }
        return losses

    def figure_calls(self, backend: str) -> list[Call]:
        # Per precision, the options its figure was measured at (the model's quality.json).
        calls = []
        for precision in self.models:
            entry = backends_of(self._quality, precision).get(backend)
            if entry is not None:
                options = dict(entry.get("options") or {})
                calls.append(self.measured_call(backend, options, precision))
        return calls

    def calibration_batch(self, backend: str) -> tuple[list[Any], Call, int]:
        rows = self.head.sample_rows(CALIBRATION_DOCUMENT, CALIBRATION_ROWS, CALIBRATION_TOKENS)
        return rows, self.default_call(backend), max(map(len, rows))

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], Call]]:
        call = self.default_call(backend)
        return [(rows, call) for rows in self.head.warmup_rows(backend)]

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        served, copies = self.compiled_copies(backends)
        self.head.compile(served, copies, mode, compiler)

    def tokenize(self, inputs: list[Any], truncate: bool = True) -> list[Any]:
        """Rows for texts (or pairs) as the model tokenizes them (for tests and benchmarks)."""
        return self.model.tokenize(inputs, truncate)

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        return self.head.tokens(texts, add_special_tokens, prompt_name)

    def decode(self, ids: list[list[int]], skip_special_tokens: bool) -> list[str]:
        return self.model.tokenizer.decode(ids, skip_special_tokens)
