"""Measure how close each attention backend's late interaction (MaxSim) comes to exact attention.

    attnserve evaluate path/to/multi-vector-folder [--pairs-per-band 100] [--max-tokens 2048]
    attnserve evaluate path/to/multi-vector-folder --precisions bfloat16 int8 [--out quality.json]

A multi-vector (ColBERT) model (:mod:`models.text.multi_vector`) answers a query with the
documents ranked by MaxSim over token vectors (Khattab & Zaharia, SIGIR 2020, section 3.3), so
each backend is judged as a reranker is (:mod:`models.text.quality.classifier`), on the same
corpus: :func:`~models.text.quality.classifier.build_corpus` over the standard-library
docstrings, queries of a docstring's first sentence, ``--candidates`` documents each, cut so
their token counts spread over each band of :func:`models.text.quality.embedding.bands_for`. Here a pair's
length is its document's tokens on the document side (prompt included): the query is encoded
apart, on the query side (its prompt and expansion, at most ``query_length`` tokens).

Every query and document is encoded with the exact reference (``full`` up to 512 tokens, else
``flash``) and with every other backend the model accepts, at its default options; per backend:

- ``kendall_tau``: Kendall's tau-b of each query's MaxSim scores to the exact ones
  (:func:`models.text.quality.ranking.rank_figures`), averaged over queries; ``loss`` = 1 - that mean,
  what ``attention: "auto"`` budgets against (:func:`models.quality_loss.classifier_losses`);
- ``ndcg_at_10``: NDCG@10 of the backend's ranking with the exact ranking as graded relevance;
- ``mean_cosine`` / ``min_cosine``: cosine similarity of each kept token vector (the documents'
  and their queries') to the exact one, averaged over all of them / the lowest.

``by_tokens`` holds the same figures per band of document token counts. ``quality.json`` (the
folder's, or ``--out``; :mod:`models.quality_file`) has the layout of the other text models',
``task`` ``multi_vector``; ``--precisions`` measures those precisions (:meth:`with_precision`)
against the float32 exact vectors, every backend the reference included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.text.multi_vector import MultiVectorModel, VectorRow
from models.text.quality.backends import measure_backends
from models.text.quality.classifier import (
    CANDIDATES,
    Band,
    Corpus,
    build_corpus,
    pair_main,
)
from models.text.quality.ranking import by_band, query_document_corpus, rank_figures
from models.text.tokens.pairs import PairRow

TASK = "multi_vector"
BATCH_ROWS = 16  # rows per forward pass: a band's documents are of similar lengths


class DocumentTokens:
    """:func:`~models.text.quality.classifier.build_corpus`'s tokenizer for a multi-vector
    model: a pair's row is its document on the document side (the query is encoded apart)."""

    def __init__(self, model: MultiVectorModel) -> None:
        self.model = model

    def tokenize(self, inputs: Sequence[tuple[str, str]], truncate: bool = False) -> list[PairRow]:
        """The document row of each ``(query, document)`` pair."""
        rows = self.model.rows([document for _, document in inputs], "document", truncate)
        return [PairRow(row.ids, [0] * len(row)) for row in rows]


@dataclass(frozen=True)
class Encoded:
    """The corpus as the model reads it: each group's query row, each pair's document row."""

    corpus: Corpus
    queries: list[VectorRow]
    documents: list[VectorRow]


def encode_corpus(
    model: MultiVectorModel, plan: Sequence[tuple[Band, int]], candidates: int = CANDIDATES
) -> Encoded:
    """:func:`~models.text.quality.classifier.build_corpus` of ``plan``, as query and
    document rows."""
    corpus = build_corpus(DocumentTokens(model), plan, candidates)
    queries = [corpus.pairs[group[0]][0] for group in corpus.groups]
    documents = [document for _, document in corpus.pairs]
    return Encoded(
        corpus,
        model.rows(queries, "query", truncate=True),
        model.rows(documents, "document", truncate=True),
    )


@dataclass(frozen=True)
class Vectors:
    """One backend's kept token vectors of every query and document, and the MaxSim scores
    ``[pairs, 1]`` of each group's documents against its query."""

    queries: list[Tensor]
    documents: list[Tensor]
    scores: Tensor


def run(model: MultiVectorModel, encoded: Encoded, backend: str) -> Vectors:
    """The vectors and scores of ``encoded`` under ``backend`` at its default options."""

    def vectors(rows: list[VectorRow]) -> list[Tensor]:
        out: list[Tensor] = []
        for start in range(0, len(rows), BATCH_ROWS):
            out += model.vectors(rows[start : start + BATCH_ROWS], backend)
        return out

    queries, documents = vectors(encoded.queries), vectors(encoded.documents)
    scores = torch.zeros(len(documents), 1, dtype=torch.float64)
    for query, group in zip(queries, encoded.corpus.groups, strict=True):
        got = model.score(query, [documents[i] for i in group])
        scores[group, 0] = torch.tensor(got, dtype=torch.float64)
    return Vectors(queries, documents, scores)


def summarise(got: Vectors, exact: Vectors, corpus: Corpus, bands: Sequence[Band]) -> dict:
    """The figures overall and per band of document token counts (each over the band's
    documents and the queries they answer)."""

    def cosines(a: list[Tensor], b: list[Tensor]) -> list[Tensor]:
        return [F.cosine_similarity(x, y, dim=-1) for x, y in zip(a, b, strict=True)]

    queries = cosines(got.queries, exact.queries)
    documents = cosines(got.documents, exact.documents)

    def figures(groups: list[list[int]]) -> dict[str, Any]:
        tokens = torch.cat(
            [documents[i] for g in groups for i in g]
            + [queries[q] for q, g in enumerate(groups) if g]
        )
        return {
            **rank_figures(got.scores, exact.scores, groups),
            "mean_cosine": round(float(tokens.mean()), 6),
            "min_cosine": round(float(tokens.min()), 6),
        }

    return by_band(corpus.groups, corpus.lengths, bands, figures)


def measure(
    model: MultiVectorModel,
    plan: Sequence[tuple[Band, int]],
    precisions: Sequence[str] = (),
    candidates: int = CANDIDATES,
    backends: Sequence[str] | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """Every accepted backend's figures against the exact reference on :func:`encode_corpus` of
    ``plan``, and in each of ``precisions`` every backend's against the float32 exact vectors.
    ``reference`` defaults to :func:`models.text.quality.embedding.reference_for` the longest band."""
    bands = [band for band, _ in plan]
    encoded = encode_corpus(model, plan, candidates)
    reference, sections = measure_backends(
        model,
        bands,
        backends,
        reference,
        precisions,
        lambda copy, name: run(copy, encoded, name),
        lambda got, exact: summarise(got, exact, encoded.corpus, bands),
    )
    return {
        "task": TASK,
        "reference": reference,
        "metric": "loss = 1 - mean Kendall tau-b, per query, of each backend's MaxSim scores to "
        "the exact-attention scores; ndcg_at_10 with the exact ranking as graded relevance; "
        "mean_cosine / min_cosine of each kept token vector to the exact one",
        "corpus": query_document_corpus(encoded.corpus, encoded.queries, bands),
        "precisions": sections,
    }


def main(argv: list[str] | None = None) -> None:
    pair_main(
        argv,
        __doc__,
        "a multi-vector (ColBERT) folder",
        "token vectors",
        MultiVectorModel.from_folder,
        measure,
        lambda model: model.side_tokenizers["document"].max_tokens,
    )


if __name__ == "__main__":
    main()
