"""``TextModel``: what every text model the service calls shares, whatever its head.

A text model is a BERT-family network (:class:`~models.text.network.bert.BertEncoder`, one loaded copy of
the weights serving every attention backend), a tokenizer and a head on the network's token
states: pooling for a :class:`~models.text.encoder.SentenceEncoder`, a classification head for a
:class:`~models.text.classifier.TextClassifier`. This base owns the rest: loading from a folder,
the token checks, the sub-batch loop (a text alone runs unpadded), the attention check, memory
and work estimates, copies in another precision (built through the subclass's own constructor)
and the card ``GET /models`` shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self, cast

import torch
from torch import Tensor

import models.text.network.fused_linear as fused_linear
from models.attention import BACKENDS, AttentionError, InputSpec, get_backend
from models.errors import ModelInputError
from models.hf_text.config import BackboneConfig
from models.precision import convert_network, needs_conversion, precision_of
from models.quality_file import card_quality
from models.text.folders.embedding import TextFolder
from models.text.folders.weights import load_network
from models.text.network.bert import BertEncoder, PackedBatch
from models.text.network.costs import network_bytes, network_work
from models.text.quality.card import load_quality
from models.text.tokens.batching import plan_batches, round_up
from models.text.tokens.tokenizer import TextTokenizer
from models.text.twins import twin_of

DEFAULT_ATTENTION = "flash"
MAX_BATCH_SIZE = 32  # sentence-transformers' default encode (and CrossEncoder.predict) batch size
PAD_MULTIPLE = 8  # padded lengths are rounded up to this: few distinct shapes for the kernels
# Linear layers left in float32 by int8, as regular expressions over the module names. None:
# with SmoothQuant every layer holds a min cosine of 0.99 to float32 on all-MiniLM-L6-v2
# (benchmarks/results/precision-cpu.md).
INT8_KEEP_FLOAT: tuple[str, ...] = ()
# The card's keys in the order it shows them; each model fills the common ones and its head's.
CARD_KEYS = (
    "name", "task", "source", "backbone", "architecture", "layers", "hidden_size", "heads",
    "key_value_heads", "output", "score", "dim", "dense", "labels", "score_activation", "label_activation", "classifier_pooling",
    "max_tokens", "default_max_tokens", "hard_max_tokens",
    "pooling", "normalize_default", "prompts", "default_prompt_name",
    "device", "dtype", "default_attention", "backends", "unavailable_backends", "quality",
    "attention_layout", "attention_fallbacks",
)  # fmt: skip


class TextModel:
    """A BERT-family network, its tokenizer and a head, with a per-call attention backend.

    Args:
        model: the loaded network.
        tokenizer: texts to token ids, at most ``max_tokens`` each.
        max_tokens: longest accepted input, special tokens included.
        name: the name it is served under.
        task: what it serves (``encode``, ``rerank``, ``classify``).
        source: where the model came from (shown on the card).
        quality_file: measured quality per backend (``attnserve evaluate`` writes it).
        default_max_tokens: the folder's own limit (``max_tokens`` overrides it).
        precision: the precision ``model`` was converted to (None: its weights' dtype; an int8
            network keeps float32 parameters beside its quantized layers, so it says so).
    """

    default_attention: str = DEFAULT_ATTENTION  # on the card; the inference calls' default
    tokenizer_class: ClassVar[type[TextTokenizer]] = TextTokenizer

    def __init__(
        self,
        model: BertEncoder,
        tokenizer: TextTokenizer,
        max_tokens: int,
        *,
        name: str,
        task: str,
        source: str,
        quality_file: Path | None,
        default_max_tokens: int | None = None,
        precision: str | None = None,
    ) -> None:
        self.model = model
        if isinstance(model, BertEncoder):  # our layers call the packed kernels; others do not
            fused_linear.prepack(model)
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.name = name
        self.task = task
        self.source = source
        self.quality_file = quality_file
        self.default_max_tokens = default_max_tokens or max_tokens
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.precision = precision or precision_of(self.dtype)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        name: str | None = None,
        max_tokens: int | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        quality_file: Path | None = None,
    ) -> Self:
        """Load a model folder (what it must hold: the subclass's ``_read_folder``).

        Args:
            folder: the model folder.
            name: served name (default: the folder's name).
            max_tokens: longest accepted input (default: the folder's ``max_seq_length``).
            quality_file: measured quality (default: ``quality.json`` in the folder).

        Raises:
            ValueError: what is wrong with the folder (missing or unreadable file, unsupported
                architecture or module, a config size out of range, a module path leading out
                of the folder, weights that do not fit the config or that nothing uses).
        """
        path = Path(folder)
        text, spec = cls._read_folder(path)
        limit = text.max_tokens if max_tokens is None else max_tokens
        # The tokenizer first: a broken one is refused before the weights are read.
        tokenizer = cls.tokenizer_class(text.weights / "tokenizer.json", limit, text.lowercase)
        network = cls._load_network(text, torch.device(device), dtype)
        quality = quality_file or path / "quality.json"
        return cls._from_parts(path, spec, network, tokenizer, limit, name or path.name, quality)

    @classmethod
    def _load_network(cls, text: TextFolder, device: torch.device, dtype: torch.dtype) -> Any:
        """The network of ``text`` on ``device`` in ``dtype``: our own encoder
        (:func:`load_network`), or a transformers backbone where the folder holds one."""
        if text.backbone == "transformers":
            from models.hf_text.network import HFBackbone

            assert isinstance(text.config, BackboneConfig)
            return HFBackbone.load(text.weights, text.config, text.pooling, device, dtype)
        return load_network(text, device, dtype)

    @classmethod
    def _read_folder(cls, path: Path) -> tuple[TextFolder, Any]:
        """The network's folder description and the model's own (its head, labels...)."""
        raise NotImplementedError

    @classmethod
    def _from_parts(
        cls,
        path: Path,
        spec: Any,
        network: BertEncoder,
        tokenizer: TextTokenizer,
        limit: int,
        name: str,
        quality_file: Path,
    ) -> Self:
        """The model from its loaded network and tokenizer and what ``_read_folder`` read."""
        raise NotImplementedError

    # ------------------------------------------------------------------ precision

    def with_precision(
        self,
        precision: str,
        keep_float: tuple[str, ...] | None = None,
        smooth: bool | tuple[str, ...] = True,
    ) -> Self:
        """This model (float32) in ``precision``: a new model over a converted copy of the
        network, built by its own constructor and sharing tokenizer, settings and quality
        figures (float32: this one). int8 only (:func:`models.precision.convert_network`):
        ``keep_float`` names linear layers left in float32 (default :data:`INT8_KEEP_FLOAT`),
        and ``smooth`` calibrates the others' input ranges on shipped texts first (True: every
        layer; patterns over the module names: the layers they match only).

        Raises:
            ValueError: this model is not float32 (convert from the float32 weights), or an
                unknown precision.
        """
        if not needs_conversion(self.precision, precision):
            return self
        network = convert_network(
            self.model,
            precision,
            calibrate=lambda net: self._calibrate(cast(BertEncoder, net)),
            keep_float=INT8_KEEP_FLOAT if keep_float is None else keep_float,
            smooth=smooth,
        )
        return self._with_network(cast(BertEncoder, network), precision)

    def _with_network(self, network: BertEncoder, precision: str) -> Self:
        """A model like this one over ``network`` (in ``precision``), through the constructor
        (:func:`models.text.twins.twin_of`)."""
        return twin_of(self, network, precision)

    def _calibrate(self, network: BertEncoder) -> None:
        """Run ``network`` in place of this model's on its int8 calibration inputs."""
        raise NotImplementedError

    @property
    def calibration_backend(self) -> str:
        """The backend calibration runs: exact attention where it fits, else the default."""
        return "full" if self.max_tokens <= 512 else self.default_attention

    # ------------------------------------------------------------------ checks

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Resolved options for ``backend`` on a padded self-attention of up to ``max_tokens``
        tokens with this network's head width, score bias and causality, on its device and
        dtype. A transformers backbone takes every backend: its layers run exact attention
        where the backend has no form for them (the card and ``x-attention-fallback`` say so).

        Raises:
            AttentionError: unknown backend, invalid option (naming it), or a backend that
                cannot run this model (its reasons, and the backends this model runs).
        """
        config = self.model.config
        chosen = get_backend(backend)
        resolved = chosen.resolve_options(options)  # an option problem raises here, naming it
        spec = InputSpec(
            lq=self.max_tokens,
            lk=self.max_tokens,
            head_dim=config.head_dim,
            dtype=self.dtype,
            device_type=self.device.type,
            causal=getattr(config, "causal", False),
            has_padding_mask=True,
            has_score_bias=config.relative_buckets > 0,
        )
        reasons = chosen.unsupported_reasons(spec, resolved)
        if reasons and not isinstance(config, BackboneConfig):
            able = [b for b in BACKENDS if not get_backend(b).unsupported_reasons(spec)]
            raise AttentionError(f"{'; '.join(reasons)}; {self.name} runs: {', '.join(able)}")
        return resolved

    def attention_fallback(self, backend: str, options: Mapping[str, Any]) -> str | None:
        """Which layers ran exact attention instead of ``backend``, and why: a transformers
        backbone's layers that have no form for it (its causal layers under a backend without
        a causal form); None when every layer ran it, as our own network's always do."""
        if isinstance(self.model, BertEncoder):
            return None
        return self.model.fallback(backend, options)

    def _check_inputs(
        self,
        token_ids: Sequence[Sequence[int]],
        backend: str,
        options: Mapping[str, Any] | None,
        token_types: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """What a forward pass of ``token_ids`` under ``backend`` needs (callers that have
        checked once already pass ``validated``): a backend that runs here (as
        :meth:`check_attention`), and rows the network can take: 1 to ``max_tokens`` ids each,
        inside the vocabulary, with segments (``token_types``, one per token) inside the
        network's.

        Raises:
            AttentionError: as :meth:`check_attention`.
            ModelInputError: a row the network cannot take (the message names its index).
        """
        self.check_attention(backend, options)
        vocab, segments = self.model.config.vocab_size, self.model.config.type_vocab_size
        for i, ids in enumerate(token_ids):
            types = None if token_types is None else token_types[i]
            if not 1 <= len(ids) <= self.max_tokens or (
                types is not None and len(types) != len(ids)
            ):
                raise ModelInputError(
                    f"input {i} has {len(ids)} tokens; each input needs 1 to {self.max_tokens} "
                    "tokens (tokenize with truncate=true to cut long texts)"
                )
            if any(
                isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in ids
            ):
                raise ModelInputError(f"input {i} holds a token id outside [0, {vocab})")
            if types is not None and segments > 1 and any(not 0 <= s < segments for s in types):
                raise ModelInputError(f"input {i} holds a segment id outside [0, {segments})")

    # ------------------------------------------------------------------ inference

    def _run(
        self,
        token_ids: Sequence[list[int]],
        width: int,
        head: Callable[[PackedBatch], Tensor],
        max_batch_size: int = MAX_BATCH_SIZE,
        max_batch_tokens: int | None = None,
        token_types: Sequence[list[int]] | None = None,
    ) -> Tensor:
        """``head`` over the network's batches of ``token_ids``: ``[len(token_ids), width]``
        float32 on CPU.

        Rows are sorted by length into sub-batches (:func:`plan_batches`) of at most
        ``max_batch_size`` rows and ``max_batch_tokens`` padded tokens, each padded to its own
        longest member, so every row gets what it would get alone (exact backends).
        """
        out = torch.empty(len(token_ids), width, dtype=torch.float32)
        lengths = [len(ids) for ids in token_ids]
        for sub in plan_batches(lengths, max(1, max_batch_size), max_batch_tokens, PAD_MULTIPLE):
            # A text on its own is not padded: with no key mask the attention block is a view of
            # the packed tokens (no scatter into zeros, no gather back, no masked kernel), and
            # padding is invisible to the exact backends anyway (the padded-batch tests).
            alone = len(sub.indices) == 1
            padded = lengths[sub.indices[0]] if alone else sub.padded_length
            batch = PackedBatch.from_lists(
                [token_ids[i] for i in sub.indices],
                padded,
                self.device,
                None if token_types is None else [token_types[i] for i in sub.indices],
            )
            out[list(sub.indices)] = head(batch).cpu()
        return out

    # ------------------------------------------------------------------ estimates

    def memory_estimate(
        self,
        backend: str,
        options: Mapping[str, Any] | None,
        rows: int,
        length: int,
        max_batch_tokens: int | None = None,
        max_batch_size: int = MAX_BATCH_SIZE,
    ) -> int:
        """Estimated peak activation bytes of a forward pass over ``rows`` inputs of up to
        ``length`` tokens: its largest sub-batch (:func:`plan_batches`, as the model cuts them)
        through the network (:mod:`models.text.network.memory`), plus the float32 outputs of every row."""
        first = plan_batches(
            [length] * rows, max(1, max_batch_size), max_batch_tokens, PAD_MULTIPLE
        )[0]
        peak = network_bytes(
            self.model,
            backend,
            options,
            len(first.indices),
            first.padded_length,
            self.dtype.itemsize,
            self.device.type,
        )
        return peak + rows * self.output_width * 4

    def work_estimate(
        self, backend: str, options: Mapping[str, Any] | None, rows: int, length: int
    ) -> float:
        """Flop-equivalents of one forward pass over ``rows`` inputs of up to ``length`` tokens,
        padded as the model pads them (:func:`models.text.network.memory.forward_work`)."""
        padded = round_up(length, PAD_MULTIPLE)
        return network_work(self.model, backend, options, rows, padded)

    @property
    def output_width(self) -> int:
        """Floats per input the model returns (embedding size, or labels)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ card

    def card(self) -> dict[str, Any]:
        """What ``GET /models`` shows: architecture, limits, the head's settings, attention
        backends (and why any is refused) and measured quality."""
        supported, unavailable = [], {}
        for backend in BACKENDS:
            try:
                self.check_attention(backend, None)
            except AttentionError as exc:
                unavailable[backend] = str(exc)
            else:
                supported.append(get_backend(backend).describe())
        config = self.model.config
        fields: dict[str, Any] = {
            "name": self.name,
            "task": self.task,
            "source": self.source,
            "architecture": config.architecture,
            "layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size,
            "heads": config.num_attention_heads,
            "max_tokens": self.max_tokens,
            "default_max_tokens": self.default_max_tokens,
            "hard_max_tokens": config.max_tokens,
            "device": str(self.device),
            "dtype": precision_of(self.dtype),
            "default_attention": self.default_attention,
            "backends": supported,
            "unavailable_backends": unavailable,
            "quality": card_quality(self.quality()),
            **self._head_card(),
        }
        return {key: fields[key] for key in CARD_KEYS if key in fields}

    def _head_card(self) -> dict[str, Any]:
        """The card's fields that belong to this model's head (keys of :data:`CARD_KEYS`)."""
        raise NotImplementedError

    def quality(self) -> dict[str, Any]:
        """Measured quality per backend (``quality.json``); {} when none was measured."""
        return load_quality(self.quality_file) if self.quality_file else {}
