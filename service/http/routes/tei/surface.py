"""The rest of text-embeddings-inference's surface (``/embed``, ``/rerank`` and ``/predict`` live
with their peers in encode.py, rerank.py and classify.py):

- ``POST /`` and ``POST /invocations`` (SageMaker): answered by the model's task, as TEI routes
  them at start-up (``router/src/http/server.rs``): an encoder embeds (or, given
  ``{"inputs": {"source_sentence", "sentences"}}``, answers ``/similarity``), a reranker reranks,
  a classifier predicts. Which model: the body's ``model`` or the ``x-model`` header, else the
  first loaded text model.
- ``POST /similarity``, ``POST /embed_all``, ``POST /tokenize``, ``POST /decode``, ``GET /info``.
- ``GET /health``, ``GET /ping`` (SageMaker) and ``GET /``: tei_health.py.

A body without ``truncate`` follows the ``auto_truncate`` setting (tei_truncate.py); a model
name no loaded model answers to is ignored, as TEI ignores it (model_names.py).

Errors keep this server's one body (``{"error": {"type", "message"}}``), not TEI's
``{"error", "error_type"}``: the clients look at the status only.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from service import __version__
from service.errors import InvalidRequest
from service.http.render import rows_json
from service.http.routes.classify import predict
from service.http.routes.deps import (
    EngineDep,
    XModel,
    client_of,
    set_timing_headers,
)
from service.http.routes.encode import tei_embed
from service.http.routes.fast_json import FastJSONRoute, json_invalid
from service.http.routes.model_names import served_names, tei_model
from service.http.routes.rerank import tei_rerank
from service.http.routes.sagemaker_forecast import invoke_forecast, wants_forecast
from service.http.routes.tei.health import router as health_router
from service.http.routes.tei.sparse import embed_sparse
from service.http.routes.tei.text_job import tei_text_job
from service.http.routes.tei.truncate import tei_truncate
from service.http.schemas.common import ERROR_RESPONSES
from service.http.schemas.rerank import TeiRerankRequest
from service.http.schemas.sparse import EmbedSparseRequest
from service.http.schemas.tei import (
    ClassifierType,
    DecodeRequest,
    EmbedAllRequest,
    EmbeddingModel,
    EmbeddingType,
    Info,
    Labels,
    RerankerType,
    RootPredictRequest,
    SimilarityRequest,
    SimpleToken,
    TokenizeRequest,
)
from service.http.schemas.text import TeiEmbedRequest

router = APIRouter(tags=["text-embeddings-inference"], route_class=FastJSONRoute)

Body = TypeVar("Body", bound=BaseModel)

# POST / takes the body of the route the model's task picks; the schema lists them all.
ROOT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"$ref": f"#/components/schemas/{name}"}
                        for name in (
                            "TeiEmbedRequest",
                            "SimilarityRequest",
                            "TeiRerankRequest",
                            "PredictRequest",
                        )
                    ]
                }
            }
        },
    }
}
# TEI's pooling names where ours differ (router: "cls", "mean", "splade", "last_token").
POOLING_NAMES = {"lasttoken": "last_token"}


def rendered(value: Any, response: Response, body: bytes | None = None) -> Response:
    """``value`` as JSON (None fields left out, as TEI leaves out ``text``), or ``body`` when
    it is already written, with the headers the handler set on ``response``."""
    if body is None:
        body = to_json(value, exclude_none=True)
    out = Response(body, media_type="application/json")
    for name, header in response.headers.items():
        if name != "content-length":
            out.headers[name] = header
    return out


async def json_of(request: Request) -> Any:
    """The request body as JSON; malformed JSON is the 422 FastAPI gives for it."""
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        position = exc.pos if isinstance(exc, json.JSONDecodeError) else exc.start
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise json_invalid(message, position) from None


def parsed(model: type[Body], data: Any, name: str) -> Body:
    """``data`` validated as ``model`` (a 422 naming each bad field, as for any route), with
    the model that answers filled in."""
    try:
        body = model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    return body.model_copy(update={"model": name})


def cosine(a: list[float], b: list[float]) -> float:
    """The cosine of two vectors (0 when either is zero)."""
    norm = math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


# ----------------------------------------------------------------------------- by task


async def answer_by_task(
    request: Request, response: Response, engine: EngineDep, x_model: str | None
) -> Response:
    """``POST /`` and ``/invocations``: the body of the route the model's task picks, answered
    by that route's handler."""
    data = await json_of(request)
    field = data.get("model") if isinstance(data, dict) else None
    named = tei_model(engine, field if isinstance(field, str) else None, x_model)
    if wants_forecast(engine, named, data):  # Chronos-2's SageMaker shape
        return await invoke_forecast(data, named, request, engine)
    name, task = engine.text_model(named)
    value: Any
    if task == "rerank":
        value = await tei_rerank(parsed(TeiRerankRequest, data, name), request, response, engine)
    elif task == "classify":
        body = parsed(RootPredictRequest, data, name)
        value = await predict(body, request, response, engine)
    elif task == "sparse":  # TEI's / on a SPLADE model: /embed_sparse
        sparse = parsed(EmbedSparseRequest, data, name)
        value = await embed_sparse(sparse, request, response, engine)
    elif isinstance(data, dict) and isinstance(data.get("inputs"), dict):
        # What huggingface_hub's sentence_similarity posts; TEI answers it at / only when
        # started with TASK=sentence-similarity, here an encoder takes both shapes.
        body_s = parsed(SimilarityRequest, data, name)
        value = await similarity(body_s, request, response, engine)
    else:
        value = await tei_embed(parsed(TeiEmbedRequest, data, name), request, response, engine)
    return rendered(value, response)


ROOT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "An encoder: /embed's answer (or /similarity's); a sparse encoder: "
        "/embed_sparse's; a reranker: /rerank's; "
        "a classifier: /predict's."
    },
    **ERROR_RESPONSES,
}


@router.post("/", response_model=None, responses=ROOT_RESPONSES, openapi_extra=ROOT_BODY)
async def root(
    request: Request, response: Response, engine: EngineDep, x_model: XModel = None
) -> Response:
    """text-embeddings-inference's ``POST /``: embed, similarity, rerank or predict, by the
    task of the model that answers."""
    return await answer_by_task(request, response, engine, x_model)


@router.post("/invocations", response_model=None, responses=ROOT_RESPONSES, openapi_extra=ROOT_BODY)
async def invocations(
    request: Request, response: Response, engine: EngineDep, x_model: XModel = None
) -> Response:
    """SageMaker's ``POST /invocations``: as ``POST /``."""
    return await answer_by_task(request, response, engine, x_model)


# ----------------------------------------------------------------------------- similarity


@router.post("/similarity", response_model=list[float], responses=ERROR_RESPONSES)
async def similarity(
    body: SimilarityRequest,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: XModel = None,
) -> list[float]:
    """The cosine similarity of each sentence with the source sentence, in order (TEI embeds
    them all in one request, unnormalised, and takes cosines)."""
    name, _ = engine.text_model(tei_model(engine, body.model, x_model), ("encode",))
    # The source sentence is embedded beside the others: the request limit counts it, and the
    # refusal counts what the client sent.
    most = engine.settings.max_inputs_per_request - 1
    if len(body.inputs.sentences) > most:
        raise InvalidRequest(
            f"too many sentences: {len(body.inputs.sentences)}; at most {most} per request "
            f"(with source_sentence, the server's limit of {most + 1} texts)"
        )
    parameters = body.parameters
    embed = TeiEmbedRequest.model_validate(
        {
            "inputs": [body.inputs.source_sentence, *body.inputs.sentences],
            "model": name,
            "normalize": False,
            "truncate": parameters.truncate if parameters else None,  # None: auto_truncate
            "truncation_direction": parameters.truncation_direction if parameters else "right",
            "prompt_name": parameters.prompt_name if parameters else None,
            "attention": body.attention,
            "attention_options": body.attention_options,
            "precision": body.precision,
            "max_quality_loss": body.max_quality_loss,
        }
    )
    source, *others = await tei_embed(embed, request, response, engine)
    return [cosine(source, other) for other in others]


# ----------------------------------------------------------------------------- embed_all


@router.post("/embed_all", response_model=list[list[list[float]]], responses=ERROR_RESPONSES)
async def embed_all(
    body: EmbedAllRequest,
    request: Request,
    response: Response,
    engine: EngineDep,
    x_model: XModel = None,
) -> Response:
    """Every token's embedding per text (the encoder's last hidden states: no pooling, no
    normalisation), special and prompt tokens included."""
    name, _ = engine.text_model(tei_model(engine, body.model, x_model), ("encode",))
    body = tei_truncate(body, engine)
    job = tei_text_job(body, "truncate" if body.truncate else "error", token_embeddings=True)
    answer = await engine.encode(name, job, client_of(request))
    set_timing_headers(response, answer)
    width = len(answer.value[0][0]) if answer.value and answer.value[0] else 1
    return rendered(None, response, await rows_json(answer.value, width))


# ----------------------------------------------------------------------------- tokens


@router.post("/tokenize", response_model=list[list[SimpleToken]], responses=ERROR_RESPONSES)
async def tokenize(
    body: TokenizeRequest, response: Response, engine: EngineDep, x_model: XModel = None
) -> Response:
    """The tokens of each whole text (no token limit applied), the model's prompt before it:
    id, text, whether special, and UTF-8 byte offsets into the text as sent with its prompt."""
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    name, tokens = await engine.tokenize(
        tei_model(engine, body.model, x_model), texts, body.add_special_tokens, body.prompt_name
    )
    response.headers["x-model"] = name
    # start / stop stay in as null for special tokens, as TEI's Option fields do.
    return rendered(None, response, await rows_json(tokens, values_per_item=5))


@router.post("/decode", response_model=list[str], responses=ERROR_RESPONSES)
async def decode(
    body: DecodeRequest, response: Response, engine: EngineDep, x_model: XModel = None
) -> list[str]:
    """The text of each list of token ids; always a list, as TEI answers (one list of ids: a
    list of one text)."""
    ids = body.ids
    rows: list[list[int]] = [ids] if not ids or isinstance(ids[0], int) else ids  # type: ignore[list-item]
    named = tei_model(engine, body.model, x_model)
    name, texts = await engine.decode(named, rows, body.skip_special_tokens)
    response.headers["x-model"] = name
    return texts


# ----------------------------------------------------------------------------- info, health


@router.get("/info", response_model=Info, responses=ERROR_RESPONSES)
async def info(
    engine: EngineDep,
    model: Annotated[str | None, Query(max_length=512, description="Which model.")] = None,
    x_model: XModel = None,
) -> Info:
    """TEI's model and router settings for one model (``model`` or ``x-model``; default: the
    first loaded text model)."""
    name, task = engine.text_model(tei_model(engine, model, x_model))
    card, settings = engine.card(name), engine.settings
    served = [alias for alias, of in served_names(engine).items() if of == name]
    model_type: EmbeddingType | ClassifierType | RerankerType
    if task == "encode":
        modes = str(card["pooling"]).split(" (")[0].split(" + ")
        pooling = "+".join(POOLING_NAMES.get(m, m) for m in modes)
        model_type = EmbeddingType(embedding=EmbeddingModel(pooling=pooling))
    else:
        labels = list(card["labels"])
        table = Labels(
            id2label={str(i): label for i, label in enumerate(labels)},
            label2id={label: i for i, label in enumerate(labels)},
        )
        is_reranker = task == "rerank"
        model_type = (
            RerankerType(reranker=table) if is_reranker else ClassifierType(classifier=table)
        )
    return Info(
        model_id=name,
        model_dtype=str(card.get("default_precision", card.get("dtype", "float32"))),
        served_model_name=served[0] if served else name,  # TEI's --served-model-name
        model_type=model_type,
        max_concurrent_requests=settings.max_queue,
        max_input_length=int(card["max_tokens"]),
        max_batch_tokens=settings.max_batch_tokens,
        max_batch_requests=settings.max_batch_size,
        max_client_batch_size=settings.max_inputs_per_request,
        auto_truncate=settings.auto_truncate,
        tokenization_workers=max(1, settings.workers),  # 0 (auto) unresolved: an in-process app
        version=__version__,
    )


router.include_router(health_router)  # GET /health, /ping and / (tei_health.py)
