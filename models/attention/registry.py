"""Backends by name: look-up, option validation, input checks, the public ``attend`` call and
what a call costs (:func:`attention_bytes`, :func:`attention_work`).

The backends are the files :data:`models.names.BACKEND_NAMES` finds in this folder, imported
here by name (``models.attention.<name>``, not through the package, so the package, which
re-exports this module, and the registry never import each other).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from models.attention.base import AttentionError, Backend, InputSpec, repeat_kv_heads
from models.attention.pricing import AttentionCall
from models.names import BACKEND_NAMES


def _load(name: str) -> Backend:
    """The ``BACKEND`` record of ``models/attention/<name>.py`` (its name is ``name``: the
    discovery in :mod:`models.names` checks the literal it reads)."""
    backend: Backend = importlib.import_module(f"models.attention.{name}").BACKEND
    return backend


_REGISTRY: dict[str, Backend] = {name: _load(name) for name in BACKEND_NAMES}

BACKENDS: tuple[str, ...] = tuple(_REGISTRY)


def names() -> tuple[str, ...]:
    """The registered backends' names by ascending ``order``, read at call time.

    Equal to :data:`BACKENDS` outside :func:`registered`. Listings that must show every backend
    (benchmark tables, quality commands) iterate over this rather than a constant bound at
    import, so a test can prove that a backend added with :func:`registered` appears in them.
    """
    return tuple(sorted(_REGISTRY, key=lambda name: _REGISTRY[name].order))


@contextlib.contextmanager
def registered(backend: Backend) -> Iterator[Backend]:
    """``backend`` looked up like the file-declared ones for the block's duration: a test's
    stand-in for a new backend file (its name and order must be new). Only :func:`names` and
    the look-ups see it: :data:`BACKENDS` and :data:`models.names.BACKEND_NAMES` stay the files.
    """
    orders = {b.order for b in _REGISTRY.values()}
    if backend.name in _REGISTRY or backend.order in orders:
        raise ValueError(f"backend {backend.name!r} (order {backend.order}) is taken")
    _REGISTRY[backend.name] = backend
    try:
        yield backend
    finally:
        del _REGISTRY[backend.name]


def get_backend(name: str) -> Backend:
    """The :class:`Backend` called ``name``; :class:`AttentionError` listing valid names if none."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise AttentionError(
            f"unknown attention backend {name!r}; valid backends: {', '.join(BACKENDS)}"
        ) from None


def resolve_options(name: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validated options for backend ``name`` with defaults filled in."""
    return get_backend(name).resolve_options(options)


def check(name: str, spec: InputSpec, options: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`AttentionError` if backend ``name`` cannot run ``spec`` with ``options``."""
    backend = get_backend(name)
    reasons = backend.unsupported_reasons(spec, backend.resolve_options(options))
    if reasons:
        raise AttentionError("; ".join(reasons))


def _check_tensors(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, attn_bias: Tensor | None
) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise AttentionError(
            f"q, k, v must be 4-D [batch, heads, length, head_dim]; got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise AttentionError(
            f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1] or q.shape[1] % k.shape[1]:
        raise AttentionError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree on batch and head_dim, and "
            "k's heads must divide q's (grouped-query attention)"
        )
    if q.dtype != k.dtype or q.dtype != v.dtype or not q.is_floating_point():
        raise AttentionError(
            f"q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise AttentionError("sequence lengths must be at least 1")
    if key_padding_mask is not None and (
        key_padding_mask.dtype != torch.bool
        or tuple(key_padding_mask.shape) != (k.shape[0], k.shape[-2])
    ):
        raise AttentionError(
            f"key_padding_mask must be bool [batch, Lk] = [{k.shape[0]}, {k.shape[-2]}]; got "
            f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
        )
    if attn_bias is not None:
        target = (q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])
        try:
            broadcasts = torch.broadcast_shapes(attn_bias.shape, target) == target
        except RuntimeError:
            broadcasts = False
        if attn_bias.dim() != 4 or not broadcasts or attn_bias.dtype != q.dtype:
            raise AttentionError(
                f"attn_bias must be a {q.dtype} tensor broadcastable to [b, h, Lq, Lk] = "
                f"{list(target)}; got {attn_bias.dtype} {tuple(attn_bias.shape)}"
            )


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    backend: str = "full",
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    attn_bias: Tensor | None = None,
    **options: Any,
) -> Tensor:
    """Attention of ``q`` over ``k``/``v`` computed by ``backend``.

    Args:
        q: ``[b, h, Lq, d]``; k, v: ``[b, h, Lk, d]``.
        backend: one of :data:`BACKENDS`.
        key_padding_mask: bool ``[b, Lk]``, True marks a real key; None means all keys are real.
        causal: query ``i`` sees keys ``j <= i`` only.
        attn_bias: float ``[b or 1, h or 1, Lq, Lk]`` added to the scaled scores (a relative
            position bias); only backends with ``capabilities.score_bias`` take it.
        options: backend options (see ``get_backend(name).options``).

    Returns:
        ``[b, h, Lq, d]`` in ``q``'s dtype. A query that sees no key gets zeros.

    Raises:
        AttentionError: unknown backend or option, out-of-range option, or an input the backend
            cannot run; the message says which and why.
    """
    chosen = get_backend(backend)
    resolved = chosen.resolve_options(options)
    _check_tensors(q, k, v, key_padding_mask, attn_bias)
    spec = InputSpec.of(q, k, key_padding_mask, causal, attn_bias)
    reasons = chosen.unsupported_reasons(spec, resolved)
    if reasons:
        raise AttentionError("; ".join(reasons))
    if attn_bias is not None:  # only score-bias backends take the argument
        resolved["attn_bias"] = attn_bias
    if k.shape[1] != q.shape[1] and not chosen.capabilities.grouped_kv:
        k, v = repeat_kv_heads(k, q.shape[1]), repeat_kv_heads(v, q.shape[1])
    return chosen.kernel(q, k, v, key_padding_mask, causal, **resolved)


def attention_bytes(
    backend: str, call: AttentionCall, options: Mapping[str, Any] | None = None
) -> int:
    """Estimated peak bytes ``backend`` allocates for ``call`` with ``options`` (validated, and
    defaults filled in; :class:`AttentionError` if invalid), beyond ``q``, ``k``, ``v``
    (:mod:`models.attention.pricing` says what is counted)."""
    chosen = get_backend(backend)
    return int(chosen.memory(call, chosen.resolve_options(options)))


def attention_work(
    backend: str, call: AttentionCall, options: Mapping[str, Any] | None = None
) -> float:
    """Flop-equivalents of ``backend`` on ``call`` with ``options`` (validated, and defaults
    filled in; :class:`AttentionError` if invalid); :mod:`models.attention.pricing` defines
    the unit."""
    chosen = get_backend(backend)
    return float(chosen.work(call, chosen.resolve_options(options)))


def option_refusals(name: str, spec: InputSpec, options: Mapping[str, Any] | None) -> list[str]:
    """Why backend ``name`` cannot run ``spec`` with ``options`` where it could with its default
    options: the reasons the options themselves cause (flash's ``padding='jagged'`` off CUDA).
    A model that lets a layer fall back to exact attention when the backend cannot run it
    still refuses these, since the caller asked for something this device cannot do."""
    backend = get_backend(name)
    own = backend.unsupported_reasons(spec, backend.resolve_options(options))
    default = set(backend.unsupported_reasons(spec, backend.resolve_options({})))
    return [r for r in own if r not in default]
