"""``MultiVectorModel``: a late-interaction (ColBERT-style) encoder, one vector per token.

ColBERT (Khattab & Zaharia, "ColBERT: Efficient and Effective Passage Search via Contextualized
Late Interaction over BERT", SIGIR 2020) keeps a text as the projected, unit-length vectors of
its tokens and scores a query against a document by MaxSim (:mod:`models.text.maxsim`);
ColBERTv2 (Santhanam et al., NAACL 2022) keeps the same encoder. This is sentence-transformers
6's ``MultiVectorEncoder`` on our own BERT-family network (one loaded copy of the weights serves
every attention backend, chosen per call), read from its folder
(:mod:`models.text.folders.multi_vector`):

1. the text, with the side's prompt (``[Q] ``/``[D] `` markers are prompts), is tokenized at the
   side's limit (``query_length`` / ``document_length`` / ``max_seq_length``);
2. a query shorter than ``query_expansion.length`` is padded with ``[MASK]`` tokens (ColBERT's
   query augmentation, section 3.2); with ``attend: false`` they are queries only, not keys
   (they read the query but no token reads them), as the classic ColBERT;
3. the network's token states go through the token-level ``Dense`` and ``Normalize`` modules;
4. the vectors scored are kept (sentence-transformers' ``MultiVectorMask``): real tokens, the
   query's expansion tokens, less the skiplist (punctuation) on the skiplist's sides and, off
   the query side, tokens outside ``keep_only_token_ids``.

Sides: ``query`` (``encode_query``), ``document`` (``encode_document``) and ``none``
(``encode`` without a task: the default prompt, ``max_seq_length``, a document's masking).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.attention import AttentionError
from models.errors import ModelInputError
from models.text.base import DEFAULT_ATTENTION, PAD_MULTIPLE, TextModel
from models.text.folders.embedding import TextFolder
from models.text.folders.multi_vector import MultiVectorFolder, read_multi_vector_folder
from models.text.maxsim import maxsim_scores
from models.text.network.bert import BertEncoder, PackedBatch
from models.text.network.dense import DenseLayer, describe_dense, read_dense
from models.text.tokens.batching import round_up
from models.text.tokens.prompts import PromptedText
from models.text.tokens.tokenizer import TextTokenizer, with_prompt

SIDES = ("query", "document", "none")
INT8_CALIBRATION_PER_BIN = 16  # as the sentence encoders'


class TokenNormalize(nn.Module):
    """sentence-transformers' ``Normalize(module_input_name="token_embeddings")``: each token
    vector to unit length."""

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, p=2.0, dim=-1)


@dataclass(frozen=True)
class VectorRow:
    """One text ready for the network: ``ids`` (expansion tokens included), how many of them
    are keys (the rest are expansion tokens nothing attends to), how many are the text's own
    (``real``) and its side."""

    ids: list[int]
    keys: int
    real: int
    side: str

    def __len__(self) -> int:
        return len(self.ids)


class MultiVectorModel(TextModel, PromptedText):
    """Token vectors per text with a per-call attention backend (see the module docstring).

    Build with :meth:`from_folder`; ``encode(texts, side=...)`` gives one ``[tokens, dim]``
    tensor per text, ``score(query, documents)`` MaxSim scores; callers that tokenize up front
    (the server's batcher) use :meth:`rows` + :meth:`vectors`.
    """

    def __init__(
        self,
        model: BertEncoder,
        tokenizer: TextTokenizer,
        max_tokens: int,
        *,
        name: str,
        spec: MultiVectorFolder,
        steps: nn.Sequential,
        quality_file: Path | None = None,
        source: str = "sentence-transformers multi-vector folder",
        precision: str | None = None,
    ) -> None:
        super().__init__(
            model,
            tokenizer,
            max_tokens,
            name=name,
            task="encode",
            source=source,
            quality_file=quality_file,
            default_max_tokens=spec.text.max_tokens,
            precision=precision,
        )
        self.spec = spec
        self._set_prompts(spec.text.prompts, spec.text.default_prompt_name)
        self.steps = steps.to(self.device)
        self.dim = _width(steps, model.config.hidden_size)
        path = spec.text.weights / "tokenizer.json"
        self.side_tokenizers = {
            side: TextTokenizer(
                path, min(spec.sides[side].max_tokens, max_tokens), tokenizer.lowercase
            )
            for side in SIDES
        }
        self._skip = torch.tensor(sorted(spec.skiplist_ids), dtype=torch.long)
        keep = spec.keep_only_token_ids
        self._keep = None if keep is None else torch.tensor(sorted(keep), dtype=torch.long)

    # ------------------------------------------------------------------ loading

    @classmethod
    def _read_folder(cls, path: Path) -> tuple[TextFolder, MultiVectorFolder]:
        spec = read_multi_vector_folder(path)
        return spec.text, spec

    @classmethod
    def _from_parts(
        cls,
        path: Path,
        spec: MultiVectorFolder,
        network: BertEncoder,
        tokenizer: TextTokenizer,
        limit: int,
        name: str,
        quality_file: Path,
    ) -> MultiVectorModel:
        layers: list[nn.Module] = [
            TokenNormalize() if folder is None else read_dense(folder, on="token_embeddings")
            for _, folder in spec.steps
        ]
        return cls(
            network, tokenizer, limit, name=name, spec=spec, steps=nn.Sequential(*layers),
            quality_file=quality_file,
        )  # fmt: skip

    def _calibrate(self, network: BertEncoder) -> None:
        from models.text.quality.corpus import length_spread

        twin = self._with_network(network, self.precision)
        twin.encode(
            length_spread(INT8_CALIBRATION_PER_BIN),
            "document",
            self.calibration_backend,
            truncate=True,
        )

    # ------------------------------------------------------------------ checks

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """As :meth:`TextModel.check_attention`; also refuses flash's ``padding="jagged"``
        when queries carry expansion tokens nothing attends to: the jagged kernel reads the key
        mask as the queries too and would drop their vectors."""
        resolved = super().check_attention(backend, options)
        expansion = self.spec.sides["query"].expansion
        if resolved.get("padding") == "jagged" and expansion is not None and not expansion.attend:
            raise AttentionError(
                f"{backend}: padding='jagged' leaves out the query's expansion tokens, which are "
                "queries but not keys in this model; use padding='mask'"
            )
        return resolved

    # ------------------------------------------------------------------ tokens

    def side_prompt(self, side: str, prompt_name: str | None) -> str:
        """The prompt a text of ``side`` gets: ``prompt_name``'s, else the side's own
        (``query`` / ``document`` prompts, as ``encode_query`` / ``encode_document``), else the
        default prompt (``encode`` without a task)."""
        if prompt_name is None and side in self.prompts:
            prompt_name = side
        return self.prompt(prompt_name)

    def rows(
        self,
        texts: list[str],
        side: str = "none",
        truncate: bool = False,
        prompt_name: str | None = None,
        cut_start: bool = False,
    ) -> list[VectorRow]:
        """Each text as the network reads it on ``side``: prompt, the side's token limit
        (over it: refused unless ``truncate``), query expansion.

        Raises:
            ModelInputError: an unknown side or prompt, or a text over the side's limit.
        """
        if side not in SIDES:
            raise ModelInputError(f"unknown input_type {side!r}; one of query, document")
        prompt = self.side_prompt(side, prompt_name)
        tokenizer = self.side_tokenizers[side]
        keep = None
        if cut_start:
            keep = self.prompt_tokens(prompt) if prompt else tokenizer.leading_special()
        try:
            ids = tokenizer(with_prompt(prompt, texts), truncate=truncate, keep_start=keep)
        except ModelInputError as exc:  # windows do not apply here: the tokenizer offers them
            message = str(exc).split(", or long_text=windows")[0]
            limit = "texts sent without input_type" if side == "none" else f"{side} texts"
            raise ModelInputError(f"{message} (the limit of {limit})") from None
        expansion = self.spec.sides[side].expansion
        out = []
        for row in ids:
            extra = 0 if expansion is None else max(0, expansion.length - len(row))
            keys = len(row) + (extra if expansion is not None and expansion.attend else 0)
            full = row + [expansion.token_id] * extra if expansion is not None else row
            out.append(VectorRow(full, keys, len(row), side))
        return out

    def scored(self, row: VectorRow) -> Tensor:
        """Which of ``row``'s vectors are kept (sentence-transformers' ``MultiVectorMask``)."""
        ids = torch.tensor(row.ids, dtype=torch.long)
        keep = torch.arange(len(row.ids)) < row.real
        expansion = self.spec.sides[row.side].expansion
        if expansion is not None and (self.spec.masked or expansion.attend):
            keep[row.real :] = True  # the expansion tokens score (ColBERT section 3.2)
        if not self.spec.masked:
            return keep
        task = "document" if row.side == "none" else row.side  # no task counts as a document
        if task in self.spec.skiplist_tasks and len(self._skip):
            keep &= ~torch.isin(ids, self._skip)
        if row.side != "query" and self._keep is not None:
            keep &= torch.isin(ids, self._keep)
        return keep

    # ------------------------------------------------------------------ inference

    @torch.inference_mode()
    def vectors(
        self,
        rows: Sequence[VectorRow],
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        validated: bool = False,
    ) -> list[Tensor]:
        """The kept token vectors ``[kept, dim]`` (float32, CPU) of each row, one forward pass
        over all of them (padded as :meth:`SentenceEncoder.token_embeddings` pads; the exact
        backends give each row what it gets alone).

        Raises:
            ModelInputError, AttentionError: as :meth:`SentenceEncoder.embed`.
        """
        ids = [row.ids for row in rows]
        if not validated:
            self._check_inputs(ids, backend, options)
        lengths = [len(i) for i in ids]
        padded = lengths[0] if len(lengths) == 1 else round_up(max(lengths), PAD_MULTIPLE)
        batch = PackedBatch.from_lists(ids, padded, self.device)
        keys = torch.tensor([row.keys for row in rows])
        if bool((keys < torch.tensor(lengths)).any()):
            # Expansion tokens nothing attends to: keys stop before them, queries do not.
            mask = torch.arange(padded)[None, :] < keys[:, None]  # [b, n]
            batch = replace(batch, key_padding_mask=mask.to(self.device))
        states = self.model(batch, backend, dict(options or {})).float()  # [t, c]
        out = self.steps(states).cpu().split(lengths)  # [t, dim] per row
        return [vec[self.scored(row)] for vec, row in zip(out, rows, strict=True)]

    def encode(
        self,
        texts: list[str],
        side: str = "none",
        backend: str = DEFAULT_ATTENTION,
        options: dict[str, Any] | None = None,
        truncate: bool = False,
        prompt_name: str | None = None,
    ) -> list[Tensor]:
        """``rows`` then ``vectors``: sentence-transformers' ``encode_query`` (``side="query"``),
        ``encode_document`` (``"document"``) or ``encode`` (``"none"``)."""
        self.check_attention(backend, options)
        return self.vectors(self.rows(texts, side, truncate, prompt_name), backend, options)

    def score(self, query: Tensor, documents: Sequence[Tensor]) -> list[float]:
        """The model's similarity (MaxSim or MeanMaxSim) of ``query``'s vectors to each
        document's."""
        return maxsim_scores(query, documents, mean=self.spec.similarity == "meanmaxsim")

    @property
    def output_width(self) -> int:
        """Floats per token vector."""
        return self.dim

    # ------------------------------------------------------------------ card

    def _head_card(self) -> dict[str, Any]:
        """Output kind, token vector width, the Dense modules, prompts."""
        fields: dict[str, Any] = {
            "output": "multi-vector",
            "dim": self.dim,
            "prompts": self.prompts,
            "default_prompt_name": self.default_prompt_name,
            "backbone": "attnserve",
            "normalize_default": any(isinstance(m, TokenNormalize) for m in self.steps),
        }
        dense = [describe_dense(m) for m in self.steps if not isinstance(m, TokenNormalize)]
        if dense:
            fields["dense"] = dense
        return fields

    def describe_multi_vector(self) -> dict[str, Any]:
        """The late-interaction settings for the card: similarity, each side's token limit and
        query expansion, the skiplist."""
        spec = self.spec
        sides: dict[str, Any] = {}
        for side in SIDES:
            entry: dict[str, Any] = {"max_tokens": self.side_tokenizers[side].max_tokens}
            expansion = spec.sides[side].expansion
            if expansion is not None:
                entry["expansion"] = {
                    "strategy": expansion.strategy,
                    "length": expansion.length,
                    "token_id": expansion.token_id,
                    "attend": expansion.attend,
                }
            sides[side] = entry
        return {
            "similarity": spec.similarity,
            "token_dim": self.dim,
            "sides": sides,
            "mask": {
                "module": spec.masked,
                "skiplist_words": list(spec.skiplist_words),
                "skiplist_tasks": list(spec.skiplist_tasks),
                "keep_only_token_ids": None
                if spec.keep_only_token_ids is None
                else sorted(spec.keep_only_token_ids),
            },
        }


def _width(steps: nn.Sequential, hidden: int) -> int:
    """The vector width after ``steps``, each Dense taking the width before it."""
    width = hidden
    for layer in steps:
        if not isinstance(layer, DenseLayer):
            continue
        if layer.linear.in_features != width:
            raise ValueError(
                f"a Dense module takes {layer.linear.in_features} features; it is given {width}"
            )
        width = layer.linear.out_features
    return width
