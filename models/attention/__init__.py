"""Five interchangeable attention backends behind one call, chosen by name per call.

    from models.attention import attend, BACKENDS
    out = attend(q, k, v, backend="performer", key_padding_mask=None, causal=False, **options)

``q``: ``[b, h, Lq, d]``; ``k``, ``v``: ``[b, h, Lk, d]``; ``out``: ``[b, h, Lq, d]``.
``key_padding_mask``: bool ``[b, Lk]``, True = real key. Anything a backend cannot run raises
:class:`AttentionError` with a readable reason.
"""

from models.attention.base import AttentionError, Backend, InputSpec
from models.attention.registry import BACKENDS, attend, check, get_backend, resolve_options

__all__ = [
    "BACKENDS",
    "AttentionError",
    "Backend",
    "InputSpec",
    "attend",
    "check",
    "get_backend",
    "resolve_options",
]
