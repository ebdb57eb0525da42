"""vLLM's ``POST /pooling`` (tasks ``embed``, ``token_embed``, ``classify``) and, under the
``/vllm`` prefix, vLLM's ``POST /v1/embeddings`` (OpenAI's body with vLLM's extra fields), plus
what the vLLM routes share: the caller with its ``priority``, the ``truncate_prompt_tokens``
rule and the float encodings. Shapes: vLLM's ``vllm/entrypoints/pooling/pooling/protocol.py``.
"""

from __future__ import annotations

import base64
import math
import sys
from array import array
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response

from service.engine.engine import Answer, Client, Engine
from service.engine.servables.base import ClassifyInput, TextInput
from service.errors import InvalidRequest
from service.http.routes.deps import EngineDep, client_of, set_timing_headers
from service.http.routes.fast_json import FastJSONRoute
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.vllm import (
    VllmEmbeddingData,
    VllmEmbeddingRequest,
    VllmEmbeddingResponse,
    VllmPoolingData,
    VllmPoolingRequest,
    VllmPoolingResponse,
    VllmRequest,
    VllmUsageInfo,
)

router = APIRouter(tags=["vllm"], route_class=FastJSONRoute, responses=ERROR_RESPONSES)


def vllm_client(request: Request, body: VllmRequest) -> Client:
    """The engine's view of the caller, with the body's ``priority`` (lower runs first)."""
    return replace(client_of(request), priority=body.priority)


def cut_rule(engine: Engine, body: VllmRequest, task: str) -> tuple[bool, bool]:
    """``(truncate, cut_start)`` from ``truncate_prompt_tokens`` and ``truncation_side``.

    vLLM cuts an input to its last or first ``truncate_prompt_tokens`` tokens (-1: the model's
    limit) and refuses a count over the model's limit. Here inputs are cut at the model's limit
    only, so -1 and the limit itself are served and a smaller count is refused.

    Raises:
        InvalidRequest: a count other than -1 and the model's token limit.
    """
    count = body.truncate_prompt_tokens
    cut_start = body.truncation_side == "left"
    if count is None:
        return False, cut_start
    if count == -1:
        return True, cut_start
    model = engine.registry.get(body.model, task)
    limit = model.max_tokens
    if limit is None or count > limit:
        raise InvalidRequest(
            f"truncate_prompt_tokens={count} is over {model.name}'s token limit ({limit}); "
            f"send at most {limit}, or -1 for the limit"
        )
    if count < limit:
        raise InvalidRequest(
            f"truncate_prompt_tokens={count} is not supported: inputs are cut at "
            f"{model.name}'s token limit only; send -1 or {limit}, or leave it out"
        )
    return True, cut_start


def encoded(vector: list[float], body: VllmPoolingRequest) -> list[float] | str:
    """A vector as ``encoding_format`` asks: floats, or base64 of its float32 bytes in the
    body's ``endianness`` (native: this machine's, as vLLM)."""
    if body.encoding_format == "float":
        return vector
    packed = array("f", vector)
    order = sys.byteorder if body.endianness == "native" else body.endianness
    if order != sys.byteorder:
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unit(vector: list[float]) -> list[float]:
    """``vector`` scaled to unit length (a zero vector stays zero)."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm else list(vector)


def usage(answer: Answer) -> VllmUsageInfo:
    return VllmUsageInfo(prompt_tokens=answer.tokens, total_tokens=answer.tokens)


def classify_job(
    engine: Engine,
    body: VllmRequest,
    inputs: list[str] | list[tuple[str, str]],
    task: str,
    use_activation: bool | None,
    what: str = "input",
) -> ClassifyInput:
    """The classifier's job for ``inputs`` (texts, or pairs for ``task`` rerank) under the
    body's backend, precision and cut rule; ``use_activation`` false: logits."""
    truncate, cut_start = cut_rule(engine, body, task)
    return ClassifyInput(
        inputs,
        body.attention,
        body.attention_options,
        truncate=truncate,
        raw_scores=use_activation is False,
        precision=body.precision,
        what=what,
        cut_start=cut_start,
    )


def pooling_task(engine: Engine, body: VllmPoolingRequest) -> str:
    """The body's ``task``, or the model's own: ``embed`` for an encoder, else ``classify``."""
    if body.task is not None:
        return body.task
    _, task = engine.text_model(body.model, ("encode", "rerank", "classify"))
    return "embed" if task == "encode" else "classify"


async def pooled(
    engine: Engine, body: VllmPoolingRequest, task: str, request: Request, response: Response
) -> tuple[Answer, list[Any]]:
    """The engine's answer for ``body`` under ``task`` and one value per input."""
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    client = vllm_client(request, body)
    if task == "classify":
        job = classify_job(engine, body, texts, "classify", body.use_activation)
        answer = await engine.classify(body.model, job, client)
        set_timing_headers(response, answer)
        return answer, [list(row) for row in answer.value]
    truncate, cut_start = cut_rule(engine, body, "encode")
    tokens = task == "token_embed"
    text_job = TextInput(
        texts,
        body.attention,
        body.attention_options,
        # token_embed: raw token vectors from the engine, scaled here per token (below).
        normalize=None if tokens else body.use_activation,
        long_text="truncate" if truncate else "error",
        cut_start=cut_start,
        dimensions=body.dimensions,
        precision=body.precision,
        token_embeddings=tokens,
    )
    answer = await engine.encode(body.model, text_job, client)
    set_timing_headers(response, answer)
    if not tokens:
        return answer, [list(v) for v in answer.value]
    # vLLM's token_embed scales each token's vector to unit length unless use_activation=false.
    scale = unit if body.use_activation is not False else list
    return answer, [[scale(list(t)) for t in row] for row in answer.value]


@router.post("/vllm/pooling", response_model=VllmPoolingResponse)
@router.post("/pooling", response_model=VllmPoolingResponse)
async def pooling(
    body: VllmPoolingRequest, request: Request, response: Response, engine: EngineDep
) -> VllmPoolingResponse:
    """vLLM's pooling: per input, its embedding (``embed``), every token's embedding
    (``token_embed``) or its label probabilities (``classify``), in input order."""
    task = pooling_task(engine, body)
    if task != "embed" and (body.encoding_format != "float" or body.dimensions is not None):
        field = "dimensions" if body.dimensions is not None else "encoding_format"
        raise InvalidRequest(f"{field} applies to task embed only; drop it for task {task}")
    answer, values = await pooled(engine, body, task, request, response)
    data = [
        VllmPoolingData(index=i, data=encoded(v, body) if task == "embed" else v)
        for i, v in enumerate(values)
    ]
    return VllmPoolingResponse(
        id=body.answer_id("pool"), model=answer.model, data=data, usage=usage(answer)
    )


@router.post("/vllm/v1/embeddings", response_model=VllmEmbeddingResponse)
async def embeddings(
    body: VllmEmbeddingRequest, request: Request, response: Response, engine: EngineDep
) -> VllmEmbeddingResponse:
    """vLLM's OpenAI embeddings: ``/v1/embeddings`` with vLLM's extra fields
    (``truncate_prompt_tokens``, ``use_activation``, ``priority``, ...). Under ``/vllm`` so
    the OpenAI route keeps its strict body (``base_url=".../vllm/v1"``)."""
    answer, values = await pooled(engine, body, "embed", request, response)
    data = [VllmEmbeddingData(index=i, embedding=encoded(v, body)) for i, v in enumerate(values)]
    return VllmEmbeddingResponse(
        id=body.answer_id("embd"), model=answer.model, data=data, usage=usage(answer)
    )
