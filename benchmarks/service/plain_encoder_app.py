"""The reference for the server's overhead: the plainest FastAPI app around our own encoder.

No batcher, no queue, no metrics, no validation beyond pydantic's: each request is encoded in
FastAPI's thread pool the moment it arrives. Whatever attnserve adds to a request (checks,
batching, metrics, headers) shows against this in ``benchmarks/service/overhead.py``.

    .venv/bin/python -m uvicorn benchmarks.service.plain_encoder_app:app --port 8001
"""

from __future__ import annotations

import os

import torch
from fastapi import FastAPI
from pydantic import BaseModel

from models.text import SentenceEncoder

torch.set_num_threads(int(os.environ.get("PLAIN_TORCH_THREADS", "1")))
encoder = SentenceEncoder.load()
app = FastAPI()


class EncodeBody(BaseModel):
    inputs: str | list[str]
    attention: str = "flash"


@app.post("/encode")
def encode(body: EncodeBody) -> dict[str, object]:
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    vectors = encoder.encode(texts, backend=body.attention)
    return {"embeddings": vectors.tolist()}
