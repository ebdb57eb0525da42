"""Measure how close each attention backend's SPLADE sparse vectors come to exact attention.

    attnserve evaluate path/to/splade-folder [--pairs-per-band 100] [--max-tokens 512]
    attnserve evaluate path/to/splade-folder --precisions bfloat16 int8 [--out quality.json]

A SPLADE model (:mod:`models.text.sparse`; Formal et al., SIGIR 2021) retrieves by the dot
product of a query's sparse vector with each document's, so each backend is judged as a
reranker is (:mod:`models.text.quality.classifier`), on the same corpus:
:func:`~models.text.quality.classifier.build_corpus` over the standard-library docstrings,
queries of a docstring's first sentence, ``--candidates`` documents each, cut so their token
counts spread over each band of :func:`models.text.quality.embedding.bands_for`. A pair's length is its
document's tokens (prompt included); the query is encoded apart, as a query (its prompt and
route), the document as a document.

Every query and document is encoded with the exact reference (``full`` up to 512 tokens, else
``flash``) and with every other backend the model accepts, at its default options; per backend:

- ``kendall_tau``: Kendall's tau-b of each query's dot-product scores to the exact ones
  (:func:`models.text.quality.ranking.rank_figures`), averaged over queries; ``loss`` = 1 - that mean,
  what ``attention: "auto"`` budgets against (:func:`models.quality_loss.classifier_losses`,
  default budget :data:`models.quality_loss.DEFAULT_MAX_QUALITY_LOSS` ``sparse``, the
  rerankers' 0.05). The ranking is chosen as the loss because it is what a sparse index
  answers: an entry of small weight may enter or leave a vector's top entries without moving
  any score, while the ranking moves exactly when retrieval would;
- ``ndcg_at_10``: NDCG@10 of the backend's ranking with the exact ranking as graded relevance;
- ``top_k_overlap`` / ``min_top_k_overlap``: per vector, the share of the exact vector's
  ``k`` largest entries among the backend's ``k`` largest non-zero ones, ``k`` = min(32, the
  exact vector's non-zero count) (32: about the entries a query keeps, so the overlap reads
  the entries that carry the score; 1 for an empty exact vector); mean / lowest;
- ``relative_l2`` / ``max_relative_l2``: per vector, ``||v - v_exact|| / ||v_exact||``
  (0 when both are empty, 1 when only the exact one is); mean / highest.

The per-vector figures cover the vectors that run the network only: an inference-free
(Router) folder's static side (:mod:`models.text.splade`, Geng et al., arXiv:2411.04403) is
the same under every backend, so it enters the scores but not those figures (a folder whose
documents are the static side runs the network on the short queries only, so every band's
figures then describe short texts: a limit of this corpus). ``by_tokens``
holds the figures per band of document token counts (each over the band's documents and the
queries they answer). ``quality.json`` (the folder's, or ``--out``; :mod:`models.quality_file`)
has the layout of the other text models', ``task`` ``sparse``; ``--precisions`` measures
those precisions (:meth:`with_precision`) against the float32 exact vectors, every backend
the reference included.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from models.text.folders.sparse import MLM
from models.text.quality.backends import measure_backends
from models.text.quality.classifier import (
    CANDIDATES,
    Band,
    Corpus,
    build_corpus,
    pair_main,
)
from models.text.quality.ranking import by_band, query_document_corpus, rank_figures
from models.text.sparse import SparseEncoder
from models.text.tokens.pairs import PairRow

TASK = "sparse"
TOP_K = 32  # at most this many of the exact vector's largest entries are compared
BATCH_ROWS = 16  # rows per forward pass: a band's documents are of similar lengths
SIDES = ("query", "document")


@dataclass(frozen=True)
class Side:
    """How texts of one side are encoded: its route and prompt, and whether the route runs the
    network (an inference-free folder's static side does not)."""

    route: str
    prompt_name: str | None
    network: bool

    @classmethod
    def of(cls, encoder: SparseEncoder, task: str) -> Side:
        route = encoder.route_for(task)
        network = encoder.folder.routes.get(route) == MLM
        return cls(route, encoder.task_prompt(task, None), network)

    def rows(self, encoder: SparseEncoder, texts: list[str]) -> list[list[int]]:
        """Token ids of ``texts`` on this side, cut to the model's limit."""
        return encoder.tokenize(texts, True, self.prompt_name, False, self.route)


class DocumentTokens:
    """:func:`~models.text.quality.classifier.build_corpus`'s tokenizer for a sparse encoder:
    a pair's row is its document as a document (the query is encoded apart)."""

    def __init__(self, encoder: SparseEncoder) -> None:
        self.encoder = encoder
        self.side = Side.of(encoder, "document")

    def tokenize(self, inputs: Sequence[tuple[str, str]], truncate: bool = False) -> list[PairRow]:
        """The document row of each ``(query, document)`` pair."""
        rows = self.side.rows(self.encoder, [document for _, document in inputs])
        return [PairRow(ids, [0] * len(ids)) for ids in rows]


@dataclass(frozen=True)
class Encoded:
    """The corpus as the model reads it: each group's query row, each pair's document row, and
    the two sides."""

    corpus: Corpus
    queries: list[list[int]]
    documents: list[list[int]]
    query_side: Side
    document_side: Side


def encode_corpus(
    encoder: SparseEncoder, plan: Sequence[tuple[Band, int]], candidates: int = CANDIDATES
) -> Encoded:
    """:func:`~models.text.quality.classifier.build_corpus` of ``plan``, as query and
    document rows."""
    tokens = DocumentTokens(encoder)
    corpus = build_corpus(tokens, plan, candidates)
    query_side = Side.of(encoder, "query")
    queries = [corpus.pairs[group[0]][0] for group in corpus.groups]
    documents = [document for _, document in corpus.pairs]
    return Encoded(
        corpus,
        query_side.rows(encoder, queries),
        tokens.side.rows(encoder, documents),
        query_side,
        tokens.side,
    )


@dataclass(frozen=True)
class Vectors:
    """One backend's dense vectors ``[n, V]`` of every query and document, and the dot-product
    scores ``[pairs, 1]`` of each group's documents against its query."""

    queries: Tensor
    documents: Tensor
    scores: Tensor


def run(encoder: SparseEncoder, encoded: Encoded, backend: str) -> Vectors:
    """The vectors and scores of ``encoded`` under ``backend`` at its default options."""

    def vectors(rows: list[list[int]], side: Side) -> Tensor:
        return torch.cat(
            [
                encoder.vectors(rows[start : start + BATCH_ROWS], side.route, backend)
                for start in range(0, len(rows), BATCH_ROWS)
            ]
        )

    queries = vectors(encoded.queries, encoded.query_side)
    documents = vectors(encoded.documents, encoded.document_side)
    scores = torch.zeros(len(documents), 1, dtype=torch.float64)
    for query, group in zip(queries, encoded.corpus.groups, strict=True):
        scores[group, 0] = documents[group].double() @ query.double()
    return Vectors(queries, documents, scores)


def top_k_overlap(got: Tensor, exact: Tensor, k: int = TOP_K) -> float:
    """The share of ``exact``'s ``min(k, non-zero)`` largest entries among ``got``'s as many
    largest non-zero ones (1 for an empty ``exact``)."""
    k = min(k, int(torch.count_nonzero(exact)))
    if k == 0:
        return 1.0
    want = set(torch.topk(exact, k).indices.tolist())
    top = torch.topk(got, k)
    have = {int(i) for i, v in zip(top.indices, top.values, strict=True) if v > 0}
    return len(want & have) / k


def relative_l2(got: Tensor, exact: Tensor) -> float:
    """``||got - exact|| / ||exact||``: 0 when both are empty, 1 when only ``exact`` is."""
    norm, error = float(exact.norm()), float((got - exact).norm())
    if norm == 0.0:
        return 0.0 if error == 0.0 else 1.0
    return error / norm


def summarise(got: Vectors, exact: Vectors, encoded: Encoded, bands: Sequence[Band]) -> dict:
    """The figures overall and per band of document token counts (each over the band's
    documents and the queries they answer)."""
    corpus = encoded.corpus

    def per_vector(a: Tensor, b: Tensor, network: bool) -> list[tuple[float, float]]:
        if not network:
            return [(0.0, 0.0)] * len(a)  # a static side: the same under every backend
        return [(top_k_overlap(x, y), relative_l2(x, y)) for x, y in zip(a, b, strict=True)]

    queries = per_vector(got.queries, exact.queries, encoded.query_side.network)
    documents = per_vector(got.documents, exact.documents, encoded.document_side.network)

    def figures(groups: list[list[int]]) -> dict[str, Any]:
        vectors = []
        if encoded.document_side.network:
            vectors += [documents[i] for g in groups for i in g]
        if encoded.query_side.network:
            vectors += [queries[q] for q, g in enumerate(groups) if g]
        overlaps = [o for o, _ in vectors] or [1.0]
        errors = [e for _, e in vectors] or [0.0]
        return {
            **rank_figures(got.scores, exact.scores, groups),
            "top_k_overlap": round(statistics.fmean(overlaps), 6),
            "min_top_k_overlap": round(min(overlaps), 6),
            "relative_l2": round(statistics.fmean(errors), 6),
            "max_relative_l2": round(max(errors), 6),
        }

    return by_band(corpus.groups, corpus.lengths, bands, figures)


def measure(
    encoder: SparseEncoder,
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
    encoded = encode_corpus(encoder, plan, candidates)
    reference, sections = measure_backends(
        encoder,
        bands,
        backends,
        reference,
        precisions,
        lambda copy, name: run(copy, encoded, name),
        lambda got, exact: summarise(got, exact, encoded, bands),
    )
    measured = [side for side in SIDES if getattr(encoded, f"{side}_side").network]
    return {
        "task": TASK,
        "reference": reference,
        "metric": "loss = 1 - mean Kendall tau-b, per query, of each backend's dot-product "
        "scores to the exact-attention scores; ndcg_at_10 with the exact ranking as graded "
        f"relevance; top_k_overlap (k = min({TOP_K}, the exact vector's non-zero entries)) and "
        "relative_l2 of each vector that runs the network to the exact one",
        "corpus": {
            **query_document_corpus(encoded.corpus, encoded.queries, bands),
            "network_sides": measured,
        },
        "precisions": sections,
    }


def main(argv: list[str] | None = None) -> None:
    folder = "a SPLADE sparse-encoder folder"
    pair_main(argv, __doc__, folder, "sparse vectors", SparseEncoder.from_folder, measure)


if __name__ == "__main__":
    main()
