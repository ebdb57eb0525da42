"""LitServe around the same weights as the other servers: a sentence-transformers encoder
(``--task embed``) or ``CrossEncoder`` (``--task rerank``), batching up to ``--max-batch-size``
requests.

    .venv-peers/bin/python -m benchmarks.peers.litserve_app --folder DIR --port 8001 --threads 2
    .venv-peers/bin/python -m benchmarks.peers.litserve_app --task rerank --folder DIR \
        --port 8001 --threads 2 [--max-batch-size 32]

``embed``: ``POST /predict`` with ``{"input": "a text"}`` answers ``{"embedding": [...]}``.
``rerank``: ``POST /predict`` with ``{"query": q, "documents": [d, ...]}`` answers
``{"results": [{"index": i, "relevance_score": s}, ...]}`` best first (the Cohere shape the other
servers answer); LitServe collects up to N requests and ``predict`` scores all their pairs in one
``CrossEncoder.predict`` call, chunked into forward passes of 32 pairs, the other servers' batch
(``--max-batch-size 1``: each request's documents are one forward pass of their own).

LitServe's configuration for this benchmark: one inference worker on the CPU, batches collected
for at most 10 ms (``max_batch_size`` and ``batch_timeout`` sit on the ``LitAPI`` in LitServe
0.2.x; passing them to ``LitServer`` is deprecated), one API server process (its default: as many
as inference workers).
"""

from __future__ import annotations

import argparse
from typing import Any

import litserve as ls

PAIRS_PER_PASS = 32
BATCH_TIMEOUT_S = 0.01
# LitServe's default transport (multiprocessing queues). Its ZeroMQ queue (fast_queue) is
# documented for hundreds of requests per second, which one CPU worker of this model does not
# reach, and a side-by-side here (--fast-queue) showed no consistent gain on this machine.
FAST_QUEUE = False


class FolderAPI(ls.LitAPI):
    """A ``LitAPI`` whose worker loads ``model_class`` (a sentence-transformers class) from the
    folder with the run's torch threads."""

    model_class = ""

    def __init__(self, folder: str, threads: int, max_batch_size: int) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=BATCH_TIMEOUT_S)
        self.folder = folder
        self.threads = threads

    def setup(self, device: str) -> None:
        # Imported here, in the inference worker: the API server process never needs torch.
        import sentence_transformers
        import torch

        torch.set_num_threads(self.threads)
        self.model = getattr(sentence_transformers, self.model_class)(self.folder, device=device)


class EmbeddingAPI(FolderAPI):
    """One text per request in, its embedding out; ``predict`` runs a whole batch."""

    model_class = "SentenceTransformer"

    # decode_request's `request` and encode_response's return go unannotated on purpose:
    # LitServe turns those annotations into the FastAPI endpoint's types, and without them it
    # takes its default path (the raw request's JSON in, the dict out as JSON).
    def decode_request(self, request, **kwargs: Any) -> str:
        return str(request["input"])

    def predict(self, texts: list[str], **kwargs: Any) -> Any:
        # [b, 384] float32; LitServe's default unbatch splits it into rows.
        return self.model.encode(texts, batch_size=len(texts), convert_to_numpy=True)

    def encode_response(self, output: Any, **kwargs: Any):
        return {"embedding": output.tolist()}


class RerankAPI(FolderAPI):
    """A request's (query, documents) in, its ranked scores out."""

    model_class = "CrossEncoder"

    # Unannotated on purpose, as in EmbeddingAPI: LitServe then passes the raw JSON through.
    def decode_request(self, request, **kwargs: Any) -> tuple[str, list[str]]:
        return str(request["query"]), [str(d) for d in request["documents"]]

    def predict(self, batch: Any, **kwargs: Any) -> Any:
        # Batched: a list of (query, documents); unbatched (max_batch_size 1): one of them.
        items = batch if self.max_batch_size > 1 else [batch]
        pairs = [(q, d) for q, docs in items for d in docs]
        scores = self.model.predict(pairs, batch_size=PAIRS_PER_PASS, convert_to_numpy=True)
        out, start = [], 0
        for _, docs in items:
            out.append(scores[start : start + len(docs)].tolist())
            start += len(docs)
        return out if self.max_batch_size > 1 else out[0]

    def unbatch(self, output: Any) -> Any:
        return output

    def encode_response(self, output: Any, **kwargs: Any):
        ranked = sorted(enumerate(output), key=lambda item: -item[1])
        return {"results": [{"index": i, "relevance_score": s} for i, s in ranked]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["embed", "rerank"], default="embed")
    parser.add_argument("--folder", required=True, help="sentence-transformers model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--max-batch-size", type=int, default=32, help="requests per batch")
    parser.add_argument(
        "--fast-queue",
        action=argparse.BooleanOptionalAction,
        default=FAST_QUEUE,
        help="ZeroMQ between the API server and the worker instead of multiprocessing queues",
    )
    args = parser.parse_args()
    api = EmbeddingAPI if args.task == "embed" else RerankAPI
    server = ls.LitServer(
        api(args.folder, args.threads, args.max_batch_size),
        accelerator="cpu",
        workers_per_device=1,
        fast_queue=args.fast_queue,
    )
    server.run(host=args.host, port=args.port, log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main()
