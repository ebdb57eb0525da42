"""text-embeddings-inference's truncation default: a TEI body whose ``truncate`` is absent or
null cuts texts over the model's token limit when the server's ``auto_truncate`` setting is on
(its default, as TEI >= 1.9: ``--auto-truncate`` defaults to true), and refuses them (a 422)
when it is off. ``truncate: true`` always cuts and ``truncate: false`` always refuses, as TEI's
``req.truncate.unwrap_or(info.auto_truncate)`` in ``router/src/http/server.rs`` reads them.

Only TEI's routes read the setting (``/embed``, ``/embed_all``, ``/embed_sparse``, ``/rerank``
with TEI's body, ``/predict``, ``/similarity``, and ``POST /`` / ``/invocations``, which answer
with those); the other peers' routes keep their own rule (OpenAI's and vLLM's refuse, Cohere's
``truncate`` says).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from service.engine.engine import Engine

Body = TypeVar("Body", bound=BaseModel)


def tei_truncate(body: Body, engine: Engine) -> Body:
    """``body`` with ``truncate`` set from ``auto_truncate`` when the client left it out (or
    sent null) and named no other ``long_text`` rule (an extension that says for itself)."""
    if getattr(body, "truncate", False) is not None or getattr(body, "long_text", None):
        return body
    return body.model_copy(update={"truncate": engine.settings.auto_truncate})
