"""A real HTTP server inside the test process: an app served by uvicorn on a free loopback port,
in a thread, so the peers' own client packages (openai, cohere, huggingface_hub, LangChain,
LlamaIndex) can be pointed at it as at the servers they were written for.

    with serving(make_app([...])) as url:
        OpenAI(base_url=url + "/v1", api_key="x").embeddings.create(...)

The drop-in fixture (``drop_in_url`` in ``tests/service/conftest.py``) serves three tiny
random-weight models from folders their own libraries wrote: an encoder saved by
``SentenceTransformer.save``, a one-label reranker and a three-label classifier saved by
``CrossEncoder.save``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

# The model names the drop-in server answers to (its folders' names).
DROP_IN_ENCODER = "tiny-embedder"
DROP_IN_RERANKER = "tiny-reranker"
DROP_IN_CLASSIFIER = "tiny-classifier"
CLASSIFIER_LABELS = 3


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(app: Any, timeout_s: float = 120.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port until the block ends; yields the base
    URL once ``/readyz`` answers 200 (the lifespan has loaded and warmed up every model)."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if not thread.is_alive():
                raise AssertionError("the server thread ended before it was ready")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"server not ready in {timeout_s} s")
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(30)


def drop_in_folders(root: Path) -> list[Path]:
    """The drop-in server's model folders under ``root``: an encoder (``SentenceTransformer.save``,
    mean pooling, normalised, with query/document prompts), a one-label reranker and a
    three-label classifier (``CrossEncoder.save``)."""
    from tests.utils.tiny_classifiers import save_tiny_classifier
    from tests.utils.tiny_encoders import save_tiny_encoder

    return [
        save_tiny_encoder(
            root / DROP_IN_ENCODER,
            "bert",
            prompts={"query": "query: ", "document": "passage: "},
        ),
        save_tiny_classifier(root / DROP_IN_RERANKER, "bert", 1, cross_encoder=True, seed=1),
        save_tiny_classifier(
            root / DROP_IN_CLASSIFIER, "bert", CLASSIFIER_LABELS, cross_encoder=True, seed=2
        ),
    ]
