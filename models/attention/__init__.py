"""Interchangeable attention backends behind one call, chosen by name per call.

    from models.attention import attend, BACKENDS
    out = attend(q, k, v, backend="performer", key_padding_mask=None, causal=False, **options)

``q``: ``[b, h, Lq, d]``; ``k``, ``v``: ``[b, h, Lk, d]``; ``out``: ``[b, h, Lq, d]``.
``key_padding_mask``: bool ``[b, Lk]``, True = real key. Anything a backend cannot run raises
:class:`AttentionError` with a readable reason.

Each backend is one file, ``models/attention/<name>.py``: its kernel, options, capabilities and
its memory and cost models, on a ``BACKEND`` record the registry finds by itself.
:func:`attention_bytes` and :func:`attention_work` price a call before it runs
(:mod:`models.attention.pricing` defines the units).
"""

from models.attention.base import AttentionError, Backend, InputSpec
from models.attention.pricing import AttentionCall
from models.attention.registry import (
    BACKENDS,
    attend,
    attention_bytes,
    attention_work,
    check,
    get_backend,
    resolve_options,
)

__all__ = [
    "BACKENDS",
    "AttentionCall",
    "AttentionError",
    "Backend",
    "InputSpec",
    "attend",
    "attention_bytes",
    "attention_work",
    "check",
    "get_backend",
    "resolve_options",
]
