"""A sentence encoder as a served model (the shipped MiniLM or any supported model folder):
texts checked, tokenized up front with the model's prompt, embedded in the batches the worker
forms (one forward pass per batch: no split inside the model)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION
from models.quality_loss import embedding_losses, precision_figures
from models.text import SentenceEncoder, windows
from models.text.encoder import DEFAULT_ATTENTION
from models.text.matryoshka import shorten
from models.text.prompts import TASK_PROMPTS
from models.text.quantize import (
    CALIBRATION_TEXTS,
    CALIBRATION_WORDS,
    PRECISIONS,
    SCALAR,
    Calibration,
    calibration_texts,
    quantize,
)
from models.text.tokenizer import Token
from service.engine.batching.policy import length_bucket
from service.engine.servables.backends import accepted_backends, measured_losses, served_card
from service.engine.servables.base import (
    INLINE_TOKENIZE_CHARS,
    Call,
    Checked,
    TextCall,
    TextInput,
    Work,
    check_precision,
    option_items,
)

CALIBRATION_TOKENS = 128
# Most numbers a token-embeddings answer may hold (about 80 MB of JSON, a fraction of a second
# to render on the event loop).
TOKEN_OUTPUT_VALUES = 1 << 22


class TextServable:
    """Wraps a :class:`~models.text.SentenceEncoder`, in one or more precisions.

    Args:
        encoder: the loaded encoder (float32 when ``precisions`` lists more than its own).
        aliases: other names clients may use for it (e.g. the sentence-transformers hub id).
        precisions: the precisions to serve, the default first (:mod:`models.precision`); each
            is a converted copy of ``encoder``'s weights, sharing its tokenizer.
    """

    task = "encode"

    def __init__(
        self,
        encoder: SentenceEncoder,
        aliases: tuple[str, ...] = (),
        precisions: tuple[str, ...] = (DEFAULT_PRECISION,),
    ) -> None:
        self.encoders = {p: encoder.with_precision(p) for p in precisions}
        self.encoder = self.encoders[precisions[0]]  # tokenizer, prompts, checks
        self.name = encoder.name
        self.aliases = aliases
        self.default_attention = DEFAULT_ATTENTION
        self.dim = encoder.dim
        self.max_tokens = encoder.max_tokens
        # A backend is served when every loaded precision can run it, so warm-up and "auto"
        # never meet a backend that one copy of the weights refuses.
        accepted = [accepted_backends(e.check_attention) for e in self.encoders.values()]
        self._backends = [b for b in accepted[0] if all(b in a for a in accepted)]
        self._quality = encoder.quality()
        self._losses: dict[int, dict[Call, float]] = {}
        # Fixed int8/uint8 ranges (models.text.quantize): the corpus embedded once, exactly.
        exact = "flash" if "flash" in self._backends else "full"
        self._calibration = Calibration(
            encoder.encode(calibration_texts(), exact, normalize=False, long_text="truncate")
        )

    # ------------------------------------------------------------------ per request

    def check(self, request: TextInput) -> Checked:
        """Backend and options, dimensions, output forms, prompt (or the task's) and empty
        texts; token limits come with tokenizing."""
        if request.dimensions is not None and not 1 <= request.dimensions <= self.dim:
            raise ModelInputError(
                f"dimensions must be between 1 and {self.dim} for {self.name} (its embedding "
                f"size), got {request.dimensions}"
            )
        unknown = [form for form in request.quantize if form not in PRECISIONS]
        if unknown:
            raise ModelInputError(
                f"unknown embedding type {unknown[0]!r}; one of {', '.join(PRECISIONS)}"
            )
        if request.task is not None and request.prompt_name is None:
            if request.task not in TASK_PROMPTS:
                raise ModelInputError(
                    f"unknown task {request.task!r}; one of {', '.join(TASK_PROMPTS)}"
                )
            request = replace(request, prompt_name=self.encoder.task_prompt_name(request.task))
        for i, text in enumerate(request.texts):
            if not text.strip():
                raise ModelInputError(f"input {i} is empty; every input needs some text")
        precision = check_precision(request.precision, list(self.encoders), self.name)
        backend = request.attention or self.default_attention
        options = self.encoders[precision].check_attention(backend, request.attention_options)
        skip = self.encoder.pool_skip(request.prompt_name)  # also refuses an unknown prompt
        normalize = self.encoder.normalize if request.normalize is None else request.normalize
        # Windows are pooled unnormalised and normalised once merged (in prepare's finish).
        row_normalize = normalize and request.long_text != "windows"
        call = TextCall(backend, option_items(options), row_normalize, skip, precision=precision)
        if request.token_embeddings:
            if request.long_text == "windows":
                raise ModelInputError(
                    "token embeddings come from one pass over each text: long_text windows "
                    "does not apply; send truncate=true to cut long texts"
                )
            call = replace(call, normalize=False, skip=0, pooled=False)
        inline = sum(map(len, request.texts)) <= INLINE_TOKENIZE_CHARS
        return Checked(call, request, inline)

    def prepare(self, checked: Checked) -> Work:
        request: TextInput = checked.request
        if request.long_text == "windows":
            return self._prepare_windows(request, checked.token_cap)
        truncate = request.long_text == "truncate"
        token_ids = self.encoder.tokenize(
            request.texts, truncate, request.prompt_name, request.cut_start
        )
        lengths = [len(ids) for ids in token_ids]
        if request.token_embeddings:
            self._check_token_output(sum(lengths))
        finish: Callable[[list[Any]], Any] = list
        if request.dimensions is not None or request.quantize:
            outputs = self._outputs(request)

            def finish(vectors: list[list[float]]) -> Any:
                return outputs(torch.tensor(vectors, dtype=torch.float32))

        return Work(token_ids, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def _check_token_output(self, tokens: int) -> None:
        """Refuse token embeddings whose answer would be too large to render without holding
        up the event loop (each token is ``hidden`` numbers of JSON); one text at the model's
        limit always fits."""
        hidden = self.encoder.model.config.hidden_size
        limit = max(self.max_tokens, TOKEN_OUTPUT_VALUES // hidden)
        if tokens > limit:
            raise ModelInputError(
                f"token embeddings of {tokens} tokens asked for; at most {limit} tokens per "
                f"request ({hidden} numbers come back per token): send fewer or shorter texts"
            )

    def _outputs(self, request: TextInput) -> Callable[[torch.Tensor], Any]:
        """What a job's ``[n, dim]`` embeddings become: shortened to ``dimensions`` (then
        renormalised when the embeddings are unit length), as float lists; with ``quantize``,
        ``{"float": rows, form: rows, ...}`` (int8/uint8 on the model's fixed calibration
        ranges, shortened as the embeddings are)."""
        normalize = self.encoder.normalize if request.normalize is None else request.normalize
        dimensions = request.dimensions if request.dimensions != self.dim else None

        def outputs(vectors: torch.Tensor) -> Any:
            if dimensions is not None:
                vectors = shorten(vectors, dimensions, normalize)
            if not request.quantize:
                return vectors.tolist()
            ranges = None
            if any(form in SCALAR for form in request.quantize):
                ranges = self._calibration.ranges(dimensions, normalize)
            out = {"float": vectors.tolist()}
            for form in request.quantize:
                out[form] = quantize(vectors, form, ranges).tolist()
            return out

        return outputs

    def _prepare_windows(self, request: TextInput, token_cap: int | None = None) -> Work:
        """Every text over the limit as overlapping windows, all rows of one job (so they batch
        together); ``finish`` merges each text's rows back into one vector. ``token_cap``: the
        engine's bound from the compute budget (:class:`Checked`), passed to the tokenizer so an
        over-budget request stops tokenising early."""
        split = self.encoder.split_windows(request.texts, request.prompt_name, token_cap)
        normalize = self.encoder.normalize if request.normalize is None else request.normalize
        outputs = self._outputs(request)

        def finish(vectors: list[list[float]]) -> Any:
            merged = windows.merge(torch.tensor(vectors, dtype=torch.float32), split, normalize)
            return outputs(merged)

        lengths = [len(ids) for ids in split.rows]
        return Work(split.rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def run(self, rows: list[Any], call: TextCall) -> list[Any]:
        if not call.pooled:
            states = self.encoders[call.precision].token_embeddings(
                rows, call.backend, call.options_dict, validated=True
            )
            return [s.tolist() for s in states]
        vectors = self.encoders[call.precision].embed(
            rows,
            call.backend,
            call.options_dict,
            call.normalize,
            max_batch_tokens=None,
            max_batch_size=len(rows),
            validated=True,
            skip=call.skip,
        )
        return vectors.tolist()

    def card(self) -> dict[str, Any]:
        card = served_card(self.encoder.card(), self.aliases, self.backends())
        card["precisions"] = self.precisions()
        card["default_precision"] = self.precisions()[0]
        card["dimensions"] = self.encoder.shortening.describe(self.dim)
        card["task_prompts"] = {t: self.encoder.task_prompt_name(t) for t in TASK_PROMPTS}
        card["quantization"] = {
            "types": list(PRECISIONS),
            "calibration": f"int8/uint8 ranges: per-dimension min and max over {CALIBRATION_TEXTS} "
            f"standard-library docstrings (first {CALIBRATION_WORDS} words each), embedded at load",
        }
        return card

    # ------------------------------------------------------------------ operations

    def backends(self) -> list[str]:
        return list(self._backends)

    def precisions(self) -> list[str]:
        return list(self.encoders)

    def default_call(self, backend: str, precision: str | None = None) -> TextCall:
        options = option_items(self.encoder.check_attention(backend, None))
        precision = precision or self.precisions()[0]
        return TextCall(backend, options, self.encoder.normalize, precision=precision)

    def memory_estimate(self, call: TextCall, rows: int, length: int) -> int:
        peak = self.encoders[call.precision].memory_estimate(
            call.backend, call.options_dict, rows, length, None, max_batch_size=rows
        )
        if not call.pooled:  # every token's float32 state comes back, not one vector per row
            peak += rows * length * self.encoder.model.config.hidden_size * 4
        return peak

    def work_estimate(self, call: TextCall, rows: int, length: int) -> float:
        return self.encoder.work_estimate(call.backend, call.options_dict, rows, length)

    def quality_losses(self, length: int) -> dict[Call, float]:
        # The figures do not change while serving: worked out once per length (at most
        # max_tokens of them), then asked per auto request.
        losses = self._losses.get(length)
        if losses is None:
            losses = self._losses[length] = measured_losses(
                lambda precision: embedding_losses(self._quality, length, precision),
                self.encoders,
                self._backends,
                self._measured_call,
            )
        return losses

    def measured_variants(self, backend: str) -> list[Call]:
        # Every loaded precision but the default at the backend's defaults (warmed up and priced
        # on its own: bfloat16 and int8 run other kernels), and per precision the options its
        # figure was measured at (models/text/quality.json) when they differ.
        if backend not in self._backends:
            return []
        calls = [self.default_call(backend, p) for p in self.precisions()[1:]]
        for precision in self.encoders:
            figures = precision_figures(self._quality, precision) or {}
            entry = (figures.get("backends") or {}).get(backend)
            if entry is not None:
                calls.append(
                    self._measured_call(backend, dict(entry.get("options") or {}), precision)
                )
        default = self.default_call(backend)
        return [c for i, c in enumerate(calls) if c != default and c not in calls[:i]]

    def _measured_call(
        self, backend: str, options: dict[str, Any], precision: str = DEFAULT_PRECISION
    ) -> TextCall:
        """The call a figure was measured with (options resolved as a request's would be; a
        ``None`` option was derived from the input, as the default is)."""
        given = {k: v for k, v in options.items() if v is not None}
        items = option_items(self.encoder.check_attention(backend, given))
        return TextCall(backend, items, self.encoder.normalize, precision=precision)

    def calibration_batch(self, backend: str) -> tuple[list[Any], TextCall, int]:
        # Four texts of 128 tokens: long enough that fixed overhead does not dominate, short
        # enough that timing every backend adds little to start-up.
        text = "the quick brown fox jumps over the lazy dog " * 16
        rows = [ids[:CALIBRATION_TOKENS] for ids in self.tokenize([text] * 4)]
        return rows, self.default_call(backend), max(map(len, rows))

    def tokenize(self, texts: list[str], truncate: bool = True) -> list[list[int]]:
        """Token ids per text (for warm-up batches and tests)."""
        return self.encoder.tokenize(texts, truncate)

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        """Every token of each text, the prompt prepended (TEI's ``/tokenize``)."""
        return self.encoder.tokens(texts, add_special_tokens, prompt_name)

    def decode(self, ids: list[list[int]], skip_special_tokens: bool) -> list[str]:
        """The text of each list of token ids (TEI's ``/decode``)."""
        return self.encoder.tokenizer.decode(ids, skip_special_tokens)

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], TextCall]]:
        call = self.default_call(backend)
        texts = ["warm-up", "a slightly longer sentence to warm up padded batches of text"]
        rows = self.tokenize(texts)
        if backend not in self.encoder.compiled_backends:
            return [(rows, call)]
        # Symbolic shapes: a few sizes settle the graph (sizes 1 and 2 specialise separately).
        long = self.tokenize(["warm-up " * self.max_tokens])
        return [(rows[:1], call), (rows, call), (rows * 4 + long, call)]

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        served = [b for b in backends if b in self._backends]
        if served:
            # int8's dynamically quantized linear layers run eager: their packed-weight ops are
            # not what Inductor's CPU fusions target, and eager already calls fbgemm once per
            # layer.
            for precision, encoder in self.encoders.items():
                if precision != "int8":
                    encoder.compile(served, mode, compiler)
