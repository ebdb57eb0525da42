"""The naive server: plain FastAPI around sentence-transformers' all-MiniLM-L6-v2.

    .venv-peers/bin/python -m benchmarks.peers.naive_app --folder DIR --port 8003 --threads 2

``POST /encode`` with ``{"inputs": "a text"}`` answers ``{"embeddings": [[...]]}``. No batcher,
no queue: the route is a plain ``def``, so FastAPI runs each request in its thread pool the
moment it arrives, and concurrent requests each call ``encode`` on one text at once. This is the
server most people write first; attnserve's single-client latency is compared with it.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from pydantic import BaseModel


class EncodeBody(BaseModel):
    inputs: str


def create_app(folder: str, threads: int) -> FastAPI:
    """The app; the model loads in the lifespan (on start-up, not at import)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        app.state.model = SentenceTransformer(folder, device="cpu")
        yield

    app = FastAPI(lifespan=lifespan)

    @app.post("/encode")
    def encode(body: EncodeBody, request: Request) -> dict[str, Any]:
        vectors = request.app.state.model.encode([body.inputs], convert_to_numpy=True)
        return {"embeddings": vectors.tolist()}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, help="sentence-transformers model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8003)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.folder, args.threads), host=args.host, port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
