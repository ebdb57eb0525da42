"""LitServe around all-MiniLM-L6-v2 (sentence-transformers), batching up to 32 requests.

    .venv-peers/bin/python -m benchmarks.peers.litserve_app --folder DIR --port 8001 --threads 2

``POST /predict`` with ``{"input": "a text"}`` answers ``{"embedding": [...]}``. LitServe's
configuration for this benchmark: one inference worker on the CPU, batches of up to 32 requests
collected for at most 10 ms (``max_batch_size`` and ``batch_timeout`` sit on the ``LitAPI`` in
LitServe 0.2.x; passing them to ``LitServer`` is deprecated), one API server process (its
default: as many as inference workers).
"""

from __future__ import annotations

import argparse
from typing import Any

import litserve as ls

MAX_BATCH_SIZE = 32
BATCH_TIMEOUT_S = 0.01
# LitServe's default transport (multiprocessing queues). Its ZeroMQ queue (fast_queue) is
# documented for hundreds of requests per second, which one CPU worker of this model does not
# reach, and a side-by-side here (--fast-queue) showed no consistent gain on this machine.
FAST_QUEUE = False


class EmbeddingAPI(ls.LitAPI):
    """One text per request in, its embedding out; ``predict`` runs a whole batch."""

    def __init__(self, folder: str, threads: int) -> None:
        super().__init__(max_batch_size=MAX_BATCH_SIZE, batch_timeout=BATCH_TIMEOUT_S)
        self.folder = folder
        self.threads = threads

    def setup(self, device: str) -> None:
        # Imported here, in the inference worker: the API server process never needs torch.
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self.threads)
        self.model = SentenceTransformer(self.folder, device=device)

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, help="sentence-transformers model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument(
        "--fast-queue",
        action=argparse.BooleanOptionalAction,
        default=FAST_QUEUE,
        help="ZeroMQ between the API server and the worker instead of multiprocessing queues",
    )
    args = parser.parse_args()
    server = ls.LitServer(
        EmbeddingAPI(args.folder, args.threads),
        accelerator="cpu",
        workers_per_device=1,
        fast_queue=args.fast_queue,
    )
    server.run(host=args.host, port=args.port, log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main()
