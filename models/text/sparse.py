"""``SparseEncoder``: SPLADE sparse lexical vectors with a per-call attention backend.

SPLADE (Formal et al., SIGIR 2021; SPLADE v2, arXiv:2109.10086, 2021): our BERT-family encoder
(:class:`~models.text.network.bert.BertEncoder`, one loaded copy of the weights serving every attention
backend), its masked-language-model head (:mod:`models.text.network.mlm_head`) and SPLADE pooling of
the vocabulary logits (:mod:`models.text.splade`): one weight per vocabulary entry, most of
them zero. The inference-free form (Geng et al., arXiv:2411.04403, 2024) routes one kind of
text (usually queries) through fixed per-token weights instead, with no network at all; which
route a text takes follows sentence-transformers' Router (:mod:`models.text.folders.sparse`).

Output matches sentence-transformers' ``SparseEncoder.encode`` / ``encode_query`` /
``encode_document`` for the exact backends (``tests/unit/test_sparse_encoder.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from models.errors import ModelInputError
from models.text.base import DEFAULT_ATTENTION, MAX_BATCH_SIZE, PAD_MULTIPLE, TextModel
from models.text.folders.embedding import TextFolder, read_optional_json
from models.text.folders.sparse import MLM, STATIC, SparseFolder, read_sparse_folder
from models.text.network.bert import BertEncoder, PackedBatch
from models.text.network.mlm_head import MLMHead, MLMHeadSpec, load_mlm_head
from models.text.splade import (
    LOGIT_CHUNK_TOKENS,
    keep_largest,
    nonzero_entries,
    splade_pool,
    static_vectors,
)
from models.text.tokens.batching import round_up
from models.text.tokens.prompts import TASK_PROMPTS, PromptedText
from models.text.tokens.tokenizer import TextTokenizer, with_prompt

Entries = tuple[list[int], list[float]]  # a sparse vector: indices (ascending), their values
# A tokenizer_config.json model_max_length at or above this means "no limit".
_UNLIMITED = 1_000_000


class SparseEncoder(TextModel, PromptedText):
    """Sparse vocabulary-sized vectors per text: a :class:`TextModel` whose head is the MLM
    head plus SPLADE pooling, and, for an inference-free folder, a second route of fixed
    per-token weights.

    Build with :meth:`from_folder` (a sentence-transformers ``SparseEncoder`` folder); then
    ``encode(texts, task=...)``, or ``tokenize`` + ``entries`` for callers that tokenize up
    front (the server).

    Args:
        model: the encoder network.
        head: its MLM head (float32).
        tokenizer: texts to token ids for the network, at most ``max_tokens`` each.
        max_tokens: longest accepted text, special tokens included.
        folder: what the folder said (routes, pooling, prompts, ``max_active_dims``).
        static: the ``SparseStaticEmbedding`` route's weights ``[V]`` and tokenizer, if any.
        name: the name it is served under.
        quality_file: measured quality per backend.
        precision: the precision ``model`` was converted to (:class:`TextModel`).
    """

    def __init__(
        self,
        model: BertEncoder,
        head: MLMHead,
        tokenizer: TextTokenizer,
        max_tokens: int,
        *,
        folder: SparseFolder,
        static: tuple[Tensor, TextTokenizer] | None = None,
        name: str,
        quality_file: Path | None = None,
        precision: str | None = None,
    ) -> None:
        super().__init__(
            model,
            tokenizer,
            max_tokens,
            name=name,
            task="sparse",
            source="sentence-transformers folder",
            quality_file=quality_file,
            default_max_tokens=folder.encoder.max_tokens,
            precision=precision,
        )
        self.head = head
        self.folder = folder
        self.static = static
        self.vocab_size = head.vocab_size
        self._set_prompts(folder.encoder.prompts, folder.encoder.default_prompt_name)
        self.max_active_dims = folder.max_active_dims

    # ------------------------------------------------------------------ loading

    @classmethod
    def _read_folder(cls, path: Path) -> tuple[TextFolder, SparseFolder]:
        spec = read_sparse_folder(path)
        return spec.encoder, spec

    @classmethod
    def _from_parts(
        cls,
        path: Path,
        spec: SparseFolder,
        network: BertEncoder,
        tokenizer: TextTokenizer,
        limit: int,
        name: str,
        quality_file: Path,
    ) -> SparseEncoder:
        device = next(network.parameters()).device
        head_spec = MLMHeadSpec.from_config(spec.config_json, network.config)
        head = load_mlm_head(spec.encoder.weights, head_spec, network.config, device)
        static = None if spec.static is None else _load_static(spec.static, limit, device)
        if static is not None and static[0].shape[0] != head.vocab_size:
            raise ValueError(
                f"SparseStaticEmbedding has {static[0].shape[0]} weights; the MLM head's "
                f"vocabulary has {head.vocab_size} entries"
            )
        return cls(
            network,
            head,
            tokenizer,
            limit,
            folder=spec,
            static=static,
            name=name,
            quality_file=quality_file,
        )

    def _calibrate(self, network: BertEncoder) -> None:
        """Encode shipped texts of every length band with ``network`` (int8 calibration)."""
        from models.text.quality.corpus import length_spread

        twin = self._with_network(network, self.precision)
        rows = twin.tokenize(length_spread(8), truncate=True)
        twin.entries(rows, twin.mlm_route, self.calibration_backend)

    # ------------------------------------------------------------------ routes and tokens

    @property
    def mlm_route(self) -> str:
        """The route through the network."""
        return next(route for route, kind in self.folder.routes.items() if kind == MLM)

    def route_for(self, task: str | None) -> str:
        """The route texts of ``task`` (``query``, ``document``, None) take (the Router's).

        Raises:
            ModelInputError: no route serves ``task`` (the message lists them).
        """
        try:
            return self.folder.route(task)
        except ValueError as exc:
            raise ModelInputError(f"{self.name}: {exc}") from None

    def task_prompt(self, task: str | None, prompt_name: str | None) -> str | None:
        """The prompt a text of ``task`` gets when the request names none, as
        ``encode_query`` (``query``) and ``encode_document`` (document, passage, corpus) pick."""
        if prompt_name is not None or task not in TASK_PROMPTS:
            return prompt_name
        return self.task_prompt_name(task)

    def tokenize(
        self,
        texts: list[str],
        truncate: bool = False,
        prompt_name: str | None = None,
        cut_start: bool = False,
        route: str | None = None,
    ) -> list[list[int]]:
        """Token ids per text for ``route`` (None: the network's): with special tokens for the
        network; the text's own tokens only for the static route (sentence-transformers'
        ``SparseStaticEmbedding`` tokenizes with ``add_special_tokens=False``)."""
        if route is None or self.folder.routes.get(route) != STATIC:
            return PromptedText.tokenize(self, texts, truncate, prompt_name, cut_start)
        assert self.static is not None
        tokenizer = self.static[1]
        lead, trail = tokenizer.leading_special(), tokenizer.trailing_special()
        prompted = with_prompt(self.prompt(prompt_name), texts)
        rows = tokenizer(prompted, truncate=truncate, keep_start=lead if cut_start else None)
        return [ids[lead : len(ids) - trail] for ids in rows]

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def vectors(
        self,
        token_ids: list[list[int]],
        route: str = "",
        backend: str = DEFAULT_ATTENTION,
        options: Mapping[str, Any] | None = None,
        validated: bool = False,
    ) -> Tensor:
        """Dense ``[len(token_ids), V]`` float32 CPU vectors of ``route``'s rows (one forward
        pass over them all, padded as :meth:`TextModel._run` pads them; none for the static
        route)."""
        if self.folder.routes.get(route) == STATIC:
            assert self.static is not None
            return static_vectors(token_ids, self.static[0]).cpu()
        if not validated:
            self._check_inputs(token_ids, backend, options)
        chosen = dict(options or {})
        strategy, activation = self.folder.strategy, self.folder.activation

        def pooled(batch: PackedBatch) -> Tensor:  # [b, V]
            states = self.model(batch, backend, chosen)  # [t, c]
            return splade_pool(
                states, batch.rows, batch.batch_size, self.head, strategy, activation
            )

        return self._run(token_ids, self.vocab_size, pooled, max_batch_size=len(token_ids))

    def entries(
        self,
        token_ids: list[list[int]],
        route: str = "",
        backend: str = DEFAULT_ATTENTION,
        options: Mapping[str, Any] | None = None,
        validated: bool = False,
    ) -> list[Entries]:
        """Each row's non-zero entries (:meth:`vectors`), indices ascending."""
        return nonzero_entries(self.vectors(token_ids, route, backend, options, validated))

    def encode(
        self,
        texts: list[str],
        task: str | None = None,
        backend: str = DEFAULT_ATTENTION,
        options: Mapping[str, Any] | None = None,
        prompt_name: str | None = None,
        truncate: bool = False,
        max_active_dims: int | None = None,
    ) -> list[Entries]:
        """``SparseEncoder.encode(texts, task=task, max_active_dims=...)``'s non-zero entries
        per text (``task`` query / document: ``encode_query`` / ``encode_document``);
        ``max_active_dims`` None: the folder's default."""
        self.check_attention(backend, options)
        route = self.route_for(task)
        rows = self.tokenize(texts, truncate, self.task_prompt(task, prompt_name), False, route)
        top = max_active_dims if max_active_dims is not None else self.max_active_dims
        return [keep_largest(i, v, top) for i, v in self.entries(rows, route, backend, options)]

    # ------------------------------------------------------------------ estimates and card

    @property
    def output_width(self) -> int:
        """Floats per text the network's head gives before sparsifying: the vocabulary."""
        return self.vocab_size

    def memory_estimate(self, backend: str, options: Mapping[str, Any] | None, rows: int,
                        length: int, max_batch_tokens: int | None = None,
                        max_batch_size: int = MAX_BATCH_SIZE) -> int:  # fmt: skip
        """The network's estimate plus one chunk of float32 vocabulary logits."""
        network = super().memory_estimate(
            backend, options, rows, length, max_batch_tokens, max_batch_size
        )
        return network + LOGIT_CHUNK_TOKENS * self.vocab_size * 4

    def work_estimate(
        self, backend: str, options: Mapping[str, Any] | None, rows: int, length: int
    ) -> float:
        """The network's work plus the MLM head's two products per token."""
        hidden = self.model.config.hidden_size
        head = 2.0 * rows * round_up(length, PAD_MULTIPLE) * hidden * (hidden + self.vocab_size)
        return super().work_estimate(backend, options, rows, length) + head

    def _head_card(self) -> dict[str, Any]:
        return {
            "output": "sparse",
            "dim": self.vocab_size,
            "pooling": f"splade({self.folder.strategy}, {self.folder.activation})",
            "prompts": self.prompts,
            "default_prompt_name": self.default_prompt_name,
            "backbone": "attnserve",
        }

    def card(self) -> dict[str, Any]:
        """:meth:`TextModel.card` plus the sparse output's own fields: vocabulary size, SPLADE
        pooling, ``max_active_dims`` and, for an inference-free model, its routes."""
        card = super().card()
        card["sparse"] = {
            "vocab_size": self.vocab_size,
            "pooling_strategy": self.folder.strategy,
            "activation": self.folder.activation,
            "max_active_dims": self.max_active_dims,
            "routes": {
                route or "default": "SparseStaticEmbedding (no network)"
                if kind == STATIC
                else "MLM + SpladePooling"
                for route, kind in self.folder.routes.items()
            },
            "default_route": self.folder.default_route or "",
        }
        return card


def _load_static(folder: Path, limit: int, device: torch.device) -> tuple[Tensor, TextTokenizer]:
    """``SparseStaticEmbedding``'s weights (float32 ``[V]``) and tokenizer, cut at its
    tokenizer's ``model_max_length`` (else ``limit``) tokens of text."""
    if not (folder / "model.safetensors").is_file():
        raise ValueError(f"{folder.name} lacks model.safetensors (SparseStaticEmbedding weights)")
    try:
        tensors = load_file(str(folder / "model.safetensors"), device="cpu")
    except Exception as exc:  # safetensors' SafetensorError: a damaged file
        raise ValueError(f"{folder.name}/model.safetensors cannot be read ({exc})") from None
    if set(tensors) != {"weight"} or tensors["weight"].dim() != 1:
        raise ValueError(f"{folder.name}/model.safetensors must hold one 1-d 'weight' tensor")
    length = read_optional_json(folder / "tokenizer_config.json").get("model_max_length")
    own = int(length) if isinstance(length, int | float) and length < _UNLIMITED else limit
    probe = TextTokenizer(folder / "tokenizer.json", own)
    tokenizer = TextTokenizer(folder / "tokenizer.json", own + probe.special_tokens())
    return tensors["weight"].float().to(device), tokenizer
