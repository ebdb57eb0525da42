"""LitServe around a sentence-transformers ``CrossEncoder``: one query and its documents per request.

    .venv-peers/bin/python -m benchmarks.peers.rerank_litserve_app --folder DIR --port 8001 \
        --threads 2 [--max-batch-size 32]

``POST /predict`` with ``{"query": q, "documents": [d, ...]}`` answers
``{"results": [{"index": i, "relevance_score": s}, ...]}`` best first (the Cohere shape the other
servers answer). ``--max-batch-size N``: LitServe collects up to N requests (for at most 10 ms)
and ``predict`` scores all their pairs in one ``CrossEncoder.predict`` call, chunked into
forward passes of 32 pairs, the other servers' batch; ``--max-batch-size 1``: each request's
documents are one forward pass of their own. One inference worker on the CPU, one API server
process, ``fast_queue`` off (see :mod:`.litserve_app`).
"""

from __future__ import annotations

import argparse
from typing import Any

import litserve as ls

PAIRS_PER_PASS = 32
BATCH_TIMEOUT_S = 0.01


class RerankAPI(ls.LitAPI):
    """A request's (query, documents) in, its ranked scores out."""

    def __init__(self, folder: str, threads: int, max_batch_size: int) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=BATCH_TIMEOUT_S)
        self.folder = folder
        self.threads = threads

    def setup(self, device: str) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        torch.set_num_threads(self.threads)
        self.model = CrossEncoder(self.folder, device=device)

    # Unannotated on purpose, as in litserve_app.py: LitServe then passes the raw JSON through.
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
    parser.add_argument("--folder", required=True, help="CrossEncoder folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--max-batch-size", type=int, default=32, help="requests per batch")
    args = parser.parse_args()
    server = ls.LitServer(
        RerankAPI(args.folder, args.threads, args.max_batch_size),
        accelerator="cpu",
        workers_per_device=1,
        fast_queue=False,
    )
    server.run(host=args.host, port=args.port, log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main()
