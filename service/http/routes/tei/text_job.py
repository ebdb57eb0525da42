"""The engine's input for a body of text-embeddings-inference's text shape (``/embed``,
``/encode``, ``/embed_all``, ``/embed_sparse``): one place reads the fields those bodies share."""

from __future__ import annotations

from typing import Any

from service.engine.servables.base import TextInput
from service.http.schemas.sparse import EmbedSparseRequest
from service.http.schemas.tei import EmbedAllRequest
from service.http.schemas.text import EncodeRequest

# The bodies that share TEI's text fields (TEI's own and this server's extensions).
TeiTextBody = EncodeRequest | EmbedSparseRequest | EmbedAllRequest


def tei_text_job(body: TeiTextBody, long_text: str, **route_fields: Any) -> TextInput:
    """``body``'s texts (one text or a list), backend, options, cut side (``truncation_direction``
    left: the start), prompt, precision and ``input_type`` (the task), with ``long_text`` and the
    route's own fields (``route_fields``, e.g. ``normalize``, ``dimensions``)."""
    return TextInput(
        [body.inputs] if isinstance(body.inputs, str) else body.inputs,
        body.attention,
        body.attention_options,
        long_text=long_text,
        cut_start=body.truncation_direction == "left",
        prompt_name=body.prompt_name,
        precision=body.precision,
        task=body.input_type,
        **route_fields,
    )
