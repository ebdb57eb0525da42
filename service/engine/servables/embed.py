"""The encode task of a text servable (:class:`~service.engine.servables.text.TextServable`):
what a sentence encoder adds to checking, preparing and running texts. Texts are tokenized up
front with the model's prompt and embedded (or, for ``/embed_all``, returned token by token) in
the batches the worker forms; long texts may run as windows merged back into one vector, and
embeddings may be shortened (Matryoshka) and quantized."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from models.errors import ModelInputError
from models.quality_loss import embedding_losses
from models.text import SentenceEncoder
from models.text.matryoshka import shorten
from models.text.quantize import (
    CALIBRATION_TEXTS,
    CALIBRATION_WORDS,
    PRECISIONS,
    SCALAR,
    Calibration,
    calibration_texts,
    quantize,
)
from models.text.tokens import windows
from models.text.tokens.prompts import TASK_PROMPTS
from models.text.tokens.tokenizer import Token
from service.engine.batching.policy import length_bucket
from service.engine.servables.base import Checked, OptionItems, TextCall, TextInput, Work

# The forms an embeddings answer may add beside the floats: quantized, and the floats' bytes.
OUTPUT_FORMS = (*PRECISIONS, "base64")
# Most numbers a token-embeddings answer may hold (about 80 MB of JSON, a fraction of a second
# to render on the event loop).
TOKEN_OUTPUT_VALUES = 1 << 22


def stacked(rows: list[torch.Tensor]) -> torch.Tensor:
    """A job's ``[dim]`` row embeddings (one batch's, or parts of several) as ``[n, dim]``
    float32: the values a float32 list of them holds, exactly (bfloat16 widens exactly)."""
    return torch.stack(rows).to(torch.float32)


def base64_rows(vectors: torch.Tensor) -> list[str]:
    """Each row of ``[n, dim]`` as the base64 of its float32 little-endian bytes (OpenAI's and
    Cohere's ``base64`` embedding format)."""
    data = vectors.to(torch.float32).contiguous().numpy().astype("<f4")
    return [base64.b64encode(row.tobytes()).decode("ascii") for row in data]


def calibrate(encoder: SentenceEncoder, backends: Sequence[str]) -> Calibration:
    """Fixed int8/uint8 ranges (:mod:`models.text.quantize`): the calibration corpus embedded
    once, exactly, by ``encoder`` (float32) with the first exact backend of ``backends``."""
    exact = "flash" if "flash" in backends else "full"
    texts = calibration_texts()
    return Calibration(encoder.encode(texts, exact, normalize=False, long_text="truncate"))


class Embeddings:
    """The encode task of a :class:`~models.text.SentenceEncoder`.

    Args:
        encoder: the default precision's copy (tokenizer, prompts, pooling; all copies share
            them).
        calibration: the fixed ranges of int8/uint8 embeddings (:func:`calibrate`).
    """

    task = "encode"
    labels: tuple[str, ...] = ()

    def __init__(self, encoder: SentenceEncoder, calibration: Calibration) -> None:
        self.encoder = encoder
        self.dim = encoder.dim
        self._calibration = calibration

    # ------------------------------------------------------------------ per request

    def resolve(self, request: TextInput) -> TextInput:
        """Dimensions, output forms and the task's prompt, checked before anything else."""
        if request.dimensions is not None and not 1 <= request.dimensions <= self.dim:
            raise ModelInputError(
                f"dimensions must be between 1 and {self.dim} for {self.encoder.name} (its "
                f"embedding size), got {request.dimensions}"
            )
        unknown = [form for form in request.quantize if form not in OUTPUT_FORMS]
        if unknown:
            raise ModelInputError(
                f"unknown embedding type {unknown[0]!r}; one of {', '.join(OUTPUT_FORMS)}"
            )
        if request.task is not None and request.prompt_name is None:
            if request.task not in TASK_PROMPTS:
                raise ModelInputError(
                    f"unknown task {request.task!r}; one of {', '.join(TASK_PROMPTS)}"
                )
            request = replace(request, prompt_name=self.encoder.task_prompt_name(request.task))
        return request

    def inputs(self, request: TextInput) -> tuple[Sequence[str], str]:
        """The texts, and how an error names one."""
        return request.texts, "input"

    def call(
        self, backend: str, options: OptionItems, precision: str, request: TextInput | None = None
    ) -> TextCall:
        """The call at ``backend``'s ``options``: the model's normalisation, or what
        ``request`` asks (prompt left out of pooling, normalisation, token embeddings)."""
        call = TextCall(backend, options, self.encoder.normalize, precision=precision)
        if request is None:
            return call
        skip = self.encoder.pool_skip(request.prompt_name)  # also refuses an unknown prompt
        normalize = self.encoder.normalize if request.normalize is None else request.normalize
        # Windows are pooled unnormalised and normalised once merged (in prepare's finish).
        call = replace(call, normalize=normalize and request.long_text != "windows", skip=skip)
        if request.token_embeddings:
            if request.long_text == "windows":
                raise ModelInputError(
                    "token embeddings come from one pass over each text: long_text windows "
                    "does not apply; send truncate=true to cut long texts"
                )
            call = replace(call, normalize=False, skip=0, pooled=False)
        return call

    def prepare(self, checked: Checked) -> Work:
        """Token ids per text (or windows of the long ones), and how their vectors become the
        answer."""
        request: TextInput = checked.request
        if request.long_text == "windows":
            return self._prepare_windows(request)
        truncate = request.long_text == "truncate"
        token_ids = self.encoder.tokenize(
            request.texts, truncate, request.prompt_name, request.cut_start
        )
        lengths = [len(ids) for ids in token_ids]
        if request.token_embeddings:
            self._check_token_output(sum(lengths))
        finish: Callable[[list[Any]], Any] = list  # token embeddings: lists already
        if not request.token_embeddings:
            outputs = self._outputs(request)

            def finish(vectors: list[torch.Tensor]) -> Any:
                return outputs(stacked(vectors))

        return Work(token_ids, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def _check_token_output(self, tokens: int) -> None:
        """Refuse token embeddings whose answer would be too large to render without holding
        up the event loop (each token is ``hidden`` numbers of JSON); one text at the model's
        limit always fits."""
        hidden = self.encoder.model.config.hidden_size
        limit = max(self.encoder.max_tokens, TOKEN_OUTPUT_VALUES // hidden)
        if tokens > limit:
            raise ModelInputError(
                f"token embeddings of {tokens} tokens asked for; at most {limit} tokens per "
                f"request ({hidden} numbers come back per token): send fewer or shorter texts"
            )

    def _outputs(self, request: TextInput) -> Callable[[torch.Tensor], Any]:
        """What a job's ``[n, dim]`` float32 embeddings become, all on the tensor before one
        ``tolist`` per form: shortened to ``dimensions`` (then renormalised when the embeddings
        are unit length), as float lists; with ``quantize``, ``{"float": rows, form: rows, ...}``
        (int8/uint8 on the model's fixed calibration ranges, shortened as the embeddings are;
        ``base64``: each row's float32 bytes, :func:`base64_rows`)."""
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
            out: dict[str, Any] = {"float": vectors.tolist()}
            for form in request.quantize:
                if form == "base64":
                    out[form] = base64_rows(vectors)
                else:
                    out[form] = quantize(vectors, form, ranges).tolist()
            return out

        return outputs

    def over_token_cap(self, request: TextInput, cap: int) -> int | None:
        """For long_text windows: the tokens counted when the texts (each with its prompt) hold
        more than ``cap`` while one is over the limit, reading about ``cap`` tokens' worth of
        text (:mod:`models.text.tokens.token_cap`); None when within it, or not windows."""
        if request.long_text != "windows":
            return None
        counted = self.encoder.count_up_to(request.texts, request.prompt_name, cap)
        return counted.tokens if counted.exceeded else None

    def _prepare_windows(self, request: TextInput) -> Work:
        """Every text over the limit as overlapping windows, all rows of one job (so they batch
        together); ``finish`` merges each text's rows back into one vector."""
        split = self.encoder.split_windows(request.texts, request.prompt_name)
        normalize = self.encoder.normalize if request.normalize is None else request.normalize
        outputs = self._outputs(request)

        def finish(vectors: list[torch.Tensor]) -> Any:
            return outputs(windows.merge(stacked(vectors), split, normalize))

        lengths = [len(ids) for ids in split.rows]
        return Work(split.rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def run(self, encoder: SentenceEncoder, rows: list[Any], call: TextCall) -> list[Any]:
        """``encoder``'s embedding of each of ``rows`` as a ``[dim]`` tensor (each job's finish
        stacks its rows and renders them), or every token's, unpooled, as lists."""
        if not call.pooled:
            states = encoder.token_embeddings(rows, call.backend, call.options_dict, validated=True)
            return [s.tolist() for s in states]
        vectors = encoder.embed(
            rows,
            call.backend,
            call.options_dict,
            call.normalize,
            max_batch_tokens=None,
            max_batch_size=len(rows),
            validated=True,
            skip=call.skip,
        )
        return list(vectors.unbind(0))

    def card(self) -> dict[str, Any]:
        """What the encode task adds to the card: shorter embeddings, task prompts and the
        quantized output forms."""
        return {
            "dimensions": self.encoder.shortening.describe(self.dim),
            "task_prompts": {t: self.encoder.task_prompt_name(t) for t in TASK_PROMPTS},
            "quantization": {
                "types": list(PRECISIONS),
                "calibration": "int8/uint8 ranges: per-dimension min and max over "
                f"{CALIBRATION_TEXTS} standard-library docstrings (first {CALIBRATION_WORDS} "
                "words each), embedded at load",
            },
        }

    # ------------------------------------------------------------------ operations

    def output_bytes(self, call: TextCall, rows: int, length: int) -> int:
        """What :meth:`run` returns beyond the model's estimate (which counts one vector per
        row): every token's float32 state, for token embeddings."""
        if call.pooled:
            return 0
        return rows * length * self.encoder.model.config.hidden_size * 4

    def losses(
        self, quality: Mapping[str, Any], length: int, precision: str
    ) -> dict[str, tuple[float, dict[str, Any]]]:
        """Each backend's measured loss for texts of ``length`` tokens, with its options."""
        return embedding_losses(quality, length, precision)

    def sample_rows(self, document: str, count: int, tokens: int) -> list[list[int]]:
        """``count`` copies of ``document``'s token ids, cut to ``tokens`` (a calibration
        batch)."""
        return [ids[:tokens] for ids in self.encoder.tokenize([document] * count, True)]

    def warmup_rows(self, backend: str) -> list[list[list[int]]]:
        """One small batch, or for a compiled backend a few sizes that settle its graph
        (symbolic shapes; sizes 1 and 2 specialise separately)."""
        texts = ["warm-up", "a slightly longer sentence to warm up padded batches of text"]
        rows = self.encoder.tokenize(texts, True)
        if backend not in self.encoder.compiled_backends:
            return [rows]
        long = self.encoder.tokenize(["warm-up " * self.encoder.max_tokens], True)
        return [rows[:1], rows, rows * 4 + long]

    def compile(
        self, backends: list[str], copies: list[SentenceEncoder], mode: str, compiler: str
    ) -> None:
        """``torch.compile`` each copy's forward for ``backends``."""
        for encoder in copies:
            encoder.compile(backends, mode, compiler)

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        """Every token of each text, the prompt prepended (TEI's ``/tokenize``)."""
        return self.encoder.tokens(texts, add_special_tokens, prompt_name)
