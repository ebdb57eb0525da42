"""Shared by ``/encode`` and ``/v1/embeddings``: validate texts, queue them, await embeddings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from fastapi import Request, Response
from starlette.concurrency import run_in_threadpool

from service.batching.policy import BatchKey, length_bucket
from service.errors import InvalidRequest
from service.middleware import request_state
from service.routes.deps import (
    Serving,
    check_count,
    disconnect_waiter,
    label,
    set_timing_headers,
)
from service.servables.base import TextModel

INLINE_TOKENIZE_CHARS = 4096


@dataclass
class Embedded:
    model: str
    attention: str
    vectors: list[list[float]]
    tokens: int


async def embed_texts(
    request: Request,
    response: Response,
    serving: Serving,
    model: str | None,
    inputs: str | list[str],
    attention: str | None,
    attention_options: dict[str, Any],
    normalize: bool = True,
    truncate: bool = False,
) -> Embedded:
    """Validate (model, count, backend/options, token limits), then batch and await."""
    label(request, attention=attention)
    servable = cast(TextModel, serving.registry.get(model, "encode"))
    backend = attention or servable.default_attention
    label(request, servable.name, backend)
    texts = [inputs] if isinstance(inputs, str) else inputs
    check_count(len(texts), serving.settings.max_inputs_per_request, "inputs")
    for i, text in enumerate(texts):
        if not text.strip():
            raise InvalidRequest(f"input {i} is empty; every input needs some text")
    options = servable.check_attention(backend, attention_options)
    if sum(map(len, texts)) <= INLINE_TOKENIZE_CHARS:
        token_ids = servable.tokenize(texts, truncate)  # ~10 us: cheaper than a thread hop
    else:  # long inputs: keep the event loop free while the tokenizer works
        token_ids = await run_in_threadpool(servable.tokenize, texts, truncate)
    lengths = [len(ids) for ids in token_ids]
    key = BatchKey(backend, tuple(options.items()), (normalize,), length_bucket(max(lengths)))
    result = await serving.batcher.submit(
        servable.name,
        key,
        token_ids,
        lengths,
        finish=list,
        disconnected=disconnect_waiter(request),
        request_id=request_state(request.scope).get("request_id", ""),
    )
    set_timing_headers(response, result)
    return Embedded(servable.name, backend, result.value, sum(lengths))
