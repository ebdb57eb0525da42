"""How the routes read a model name beyond the engine's lookup: TEI's routes ignore a name no
loaded model answers to, and the served names (``served_model_names``) are listed.

text-embeddings-inference serves one model and reads no model name from its bodies (its
OpenAI route only logs a name other than its served one), so a TEI client may send any name, or
none. Here several models may be loaded, so TEI's routes read the body's ``model`` field (an
extension) or the ``x-model`` header (this server's own): a name a loaded model answers to (its
name, an alias, a served name) picks it. A body's ``model`` that no loaded model answers to is
ignored, as TEI ignores it, and the route's default model answers: the first loaded model of
the route's task (``x-model`` in the response says which). An ``x-model`` header is this
server's and said on purpose, so one naming no loaded model stays a 404, as does an unknown
name on the other peers' routes (OpenAI's, Cohere's, vLLM's, infinity's, ``/encode``).
"""

from __future__ import annotations

from service.engine.engine import Engine
from service.http.routes.deps import chosen


def tei_model(engine: Engine, field: str | None, header: str | None) -> str | None:
    """The model a TEI route serves: the one ``field`` or ``header`` names (see
    :func:`~service.http.routes.deps.chosen`), a ``field`` that no loaded model answers to left
    out; None: the route's default."""
    models = engine.registry.models.values()
    known = any(field in (m.name, *m.aliases) for m in models)
    return chosen(field if known else None, header)


def served_names(engine: Engine) -> dict[str, str]:
    """Each served name (``served_model_names``) -> the loaded model it names, in the order
    the models are loaded."""
    given = {e.partition("=")[0].strip() for e in engine.settings.served_model_names.split(",")}
    models = engine.registry.models.values()
    return {alias: m.name for m in models for alias in m.aliases if alias in given}
