"""The rerank peer benchmark's model folder and requests.

The model is :func:`benchmarks.text.rerank_speed.build_cross_encoder`'s: the shipped all-MiniLM-L6-v2
encoder under a seeded one-logit head, saved by sentence-transformers' ``CrossEncoder.save``
(ms-marco-MiniLM-L-6-v2's shape and tokenizer, no download). It is built once into the cache
(``<attnserve cache>/peers/minilm-cross-encoder``), staged and renamed into place like
:mod:`.model_folder`, and every server loads that folder by path.

A request is one query and :data:`DOCS` documents: documents are the shipped standard-library
docstrings of 40-120 words, queries the first lines of shorter docstrings. Only documents whose
pair with the longest query fits the folder's 256 tokens are used, so no server truncates and
none has to agree with another on how.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.peers.model_folder import peers_root
from models.text.packaged import build_folder

NAME = "minilm-cross-encoder"
DOCS = 16  # documents per request
REQUESTS = 64  # distinct requests the clients cycle through
SEED = 0
MAX_TOKENS = 256


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: list[str]


def rerank_folder(root: Path | None = None) -> Path:
    """The cross-encoder folder every server loads (built on first use; project venv only)."""
    from benchmarks.text.rerank_speed import build_cross_encoder

    return build_folder(
        (root or peers_root()) / NAME,
        f"build_cross_encoder seed {SEED}",
        lambda tree: build_cross_encoder(tree, SEED),
    )


def rerank_requests(folder: Path, count: int = REQUESTS, docs: int = DOCS) -> list[RerankRequest]:
    """``count`` requests of one query and ``docs`` documents each, deterministic."""
    from transformers import AutoTokenizer

    from models.text.corpus import stdlib_docstrings

    texts = stdlib_docstrings()
    queries = [t.splitlines()[0][:120] for t in texts if 4 <= len(t.split()) < 20]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    longest_query = max(len(tokenizer(q)["input_ids"]) for q in queries[:count])
    budget = MAX_TOKENS - longest_query  # the document's share of the pair's tokens
    documents = [
        t for t in texts if 40 <= len(t.split()) <= 120 and len(tokenizer(t)["input_ids"]) <= budget
    ]
    return [
        RerankRequest(queries[k], [documents[(k * docs + j) % len(documents)] for j in range(docs)])
        for k in range(count)
    ]
