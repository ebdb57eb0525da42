"""Which HTTP routes answer which task: the one table model cards' ``routes`` come from.

A route that serves models asks the engine for a model of one task (``engine.encode`` ->
``encode``, ``engine.rerank`` -> ``rerank``, ...). A model answers its own task's routes and, for
a reranker, the ``classify`` ones too (:func:`service.engine.registry.task_serves`). Add a new
model route here, under the task it asks the engine for, and every card lists it;
tests/service/test_card_routes.py checks the table against the app's routes both ways.
"""

from __future__ import annotations

from service.engine.engine import TEXT_TASKS
from service.engine.registry import task_serves

# vLLM's routes (routes/vllm_pooling.py, vllm_score.py; its bodies on the shared /classify and
# rerank paths are the peers' rows'): /pooling embeds or classifies by its task field.
VLLM_POOLING = ("/pooling", "/vllm/pooling", "/vllm/v1/embeddings")
VLLM_SCORE = (
    "/score",
    "/v1/score",
    "/vllm/score",
    "/vllm/v1/score",
    "/vllm/rerank",
    "/vllm/v1/rerank",
    "/vllm/v2/rerank",
)

# task -> the POST routes that ask the engine for a model of that task.
TASK_ROUTES: dict[str, tuple[str, ...]] = {
    "encode": (
        "/encode",
        "/embed",
        "/v1/embeddings",
        "/embeddings",
        "/v1/embed",
        "/v2/embed",
        "/similarity",
        "/embed_all",
        *VLLM_POOLING,
        *VLLM_SCORE,  # an embedding model scores pairs by cosine, as vLLM's
    ),
    "rerank": ("/v1/rerank", "/rerank", "/v2/rerank", *VLLM_SCORE),
    "classify": ("/predict", "/v1/classify", "/classify", *VLLM_POOLING, "/vllm/classify"),
    "sparse": ("/embed_sparse",),
    # /invocations: Chronos-2's SageMaker shape (routes/sagemaker_forecast.py); the drop-in
    # shapes serve zero-shot forecasters and refuse the others, naming /forecast.
    "forecast": ("/forecast", "/invocations", "/v1/timeseries/forecast"),
}

# The POST routes of text-embeddings-inference that take any text model (by name, whatever its
# task): ``/`` and ``/invocations`` answer by the model's task, ``/tokenize`` and ``/decode``
# use its tokenizer (service/http/routes/tei/surface.py).
TEXT_ROUTES: tuple[str, ...] = ("/", "/invocations", "/tokenize", "/decode")


def tasks_of(model_task: str) -> list[str]:
    """The tasks whose routes a model of ``model_task`` answers, in table order."""
    return [task for task in TASK_ROUTES if task_serves(model_task, task)]


def routes_of(model_task: str) -> list[str]:
    """The routes a model of ``model_task`` answers, in table order, each once."""
    paths = [
        path
        for task, task_paths in TASK_ROUTES.items()
        if task_serves(model_task, task)
        for path in task_paths
    ]
    if model_task in TEXT_TASKS:
        paths += TEXT_ROUTES
    return list(dict.fromkeys(paths))
