"""Our attention backends inside transformers' own time-series classes, chosen per forward pass.

transformers routes every attention layer of these classes through ``ALL_ATTENTION_FUNCTIONS``
by the name in ``config._attn_implementation``. Registering one function under
:data:`IMPLEMENTATION` and setting a model to it hands every layer's ``q, k, v`` to
:func:`attend_hf`, which runs the backend of the forward pass in progress (set with
:func:`backend_scope`) through :func:`models.attention.attend`. The masks are transformers'
SDPA masks (``None`` where the layer's own ``is_causal`` says it all), read back as a causal
flag, a key padding mask or, failing both, an additive bias for the exact backends.

A layer the chosen backend cannot run (``nystrom`` is not causal, say) falls back to exact
attention (``flash`` where its fused kernel takes the shapes, else ``full``) and the scope
records it, so a card can say which layers ran what. :func:`layer_choice` is that rule and
:func:`runs_causal` reads a layer's causality: the forecaster's plan, which prices every batch,
asks the same two functions, so the plan priced is the plan run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from models.attention import attend, get_backend
from models.attention.base import InputSpec
from models.hf_forecast.folder import FolderError
from models.informer.model import LayerChoice, exact_choice

IMPLEMENTATION = "attnserve"


@dataclass
class Scope:
    """The backend of one forward pass and what each layer ran (``layer -> backend``)."""

    backend: str
    options: Mapping[str, Any]
    layers: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


_SCOPE: ContextVar[Scope | None] = ContextVar("attnserve_hf_scope", default=None)
_registered = False


def register() -> None:
    """Register :func:`attend_hf` (and SDPA's mask builder) under :data:`IMPLEMENTATION`."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, attend_hf)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
    _registered = True


def use_bridge(model: torch.nn.Module) -> None:
    """Route every attention layer of ``model`` (and its sub-configs) through :func:`attend_hf`."""
    register()
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = IMPLEMENTATION


@contextmanager
def backend_scope(backend: str, options: Mapping[str, Any] | None = None) -> Iterator[Scope]:
    """Run the forward passes inside with ``backend`` (options resolved by the caller)."""
    scope = Scope(backend, dict(options or {}))
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def layer_name(module: torch.nn.Module) -> str:
    """A stable name for an attention module (set by :func:`name_layers`, else its class)."""
    return getattr(module, "_attnserve_name", type(module).__name__)


def name_layers(model: torch.nn.Module) -> None:
    """Tag every attention module with its path in ``model`` (``model.encoder.layers.0...``)."""
    for path, module in model.named_modules():
        if hasattr(module, "q_proj") and hasattr(module, "k_proj"):
            module._attnserve_name = path


def layer_choice(backend: str, options: Mapping[str, Any], spec: InputSpec) -> LayerChoice:
    """What a layer of ``spec`` runs when ``backend`` (``options`` resolved) is asked for: the
    backend, or exact attention with the reasons it cannot take the layer. The one rule, for
    the bridge at run time and the forecaster's plan when it prices a batch."""
    reasons = get_backend(backend).unsupported_reasons(spec, options)
    if reasons:
        return exact_choice(spec, "; ".join(reasons))
    return LayerChoice(backend, dict(options))


def runs_causal(module: torch.nn.Module, lq: int, is_causal: bool | None = None) -> bool:
    """Whether a layer called without a mask attends causally: transformers' own SDPA rule
    (``integrations/sdpa_attention.py``: ``Lq > 1`` and the call's ``is_causal``, else the
    module's, default True). transformers skips a purely causal mask for SDPA, so the module's
    flag decides; its Informer decoder's self-attention says False, and runs unmasked."""
    flag = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    return bool(lq > 1 and flag)


def _read_mask(mask: Tensor, lq: int, lk: int) -> tuple[bool, Tensor | None, Tensor | None]:
    """A transformers mask ``[b, 1|h, Lq, Lk]`` (bool: True attends; float: additive) as
    ``(causal, key_padding_mask [b, Lk], bias)``; the bias only when neither pattern fits."""
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    if allowed.shape[1] == 1:
        allowed = allowed[:, 0]
        keys = allowed[:, -1]  # the last query sees every key it may: [b, Lk]
        tril = torch.ones(lq, lk, dtype=torch.bool, device=mask.device).tril()
        if torch.equal(allowed, keys[:, None, :].expand_as(allowed)):
            return False, (None if bool(keys.all()) else keys), None
        if lq == lk and torch.equal(allowed, tril & keys[:, None, :]):
            return True, (None if bool(keys.all()) else keys), None
    # A query that may see no key (a pad beyond a sliding window's reach) sees every key
    # instead: its row is dropped, but an all -inf row would be NaN, and the next layer would
    # multiply that NaN, as a key, by a weight of 0.
    seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    blind = ~seen.any(dim=-1, keepdim=True)
    if mask.dtype != torch.bool:
        return False, None, mask.masked_fill(blind, 0.0)
    bias = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    return False, None, bias.masked_fill(~(seen | blind), float("-inf"))


def attend_hf(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers' attention-function signature (``q, k, v``: ``[b, h, L, d]``), returning
    ``[b, Lq, h, d]`` as its SDPA function does. Outside a :func:`backend_scope` (a model
    trained or called directly) it runs ``full``."""
    if dropout:
        raise RuntimeError("attnserve serves in eval mode: attention dropout must be off")
    scope = _SCOPE.get()
    lq, lk, d = query.shape[-2], key.shape[-2], query.shape[-1]
    causal, padding, bias = False, None, None
    if attention_mask is not None:
        causal, padding, bias = _read_mask(attention_mask, lq, lk)
    else:
        causal = runs_causal(module, lq, is_causal)
        if causal and lk > lq:  # SDPA's top-left rule: the extra keys are never seen
            key, value, lk = key[:, :, :lq], value[:, :, :lq], lq
    if scaling is not None and not math.isclose(scaling, d**-0.5, rel_tol=1e-6):
        query = query * (scaling * math.sqrt(d))  # our kernels scale by 1/sqrt(d)
    backend = scope.backend if scope else "full"
    options = dict(scope.options) if scope else {}
    spec = InputSpec(
        lq,
        lk,
        d,
        query.dtype,
        query.device.type,
        causal=causal,
        has_padding_mask=padding is not None,
        has_score_bias=bias is not None,
    )
    choice = layer_choice(backend, options, spec)
    backend, options = choice.backend, choice.options
    if scope is not None:
        name = layer_name(module)
        scope.layers[name] = backend
        if choice.reason:
            scope.reasons[name] = choice.reason
    out = attend(
        query,
        key,
        value,
        backend,
        key_padding_mask=padding,
        causal=causal,
        attn_bias=None if bias is None else bias.to(query.dtype),
        **options,
    )
    return out.transpose(1, 2).contiguous(), None


def load_bridged(model_class: Any, folder: Path, device: str, **kwargs: Any) -> Any:
    """``model_class.from_pretrained(folder, **kwargs)`` in float32 from the folder's own files,
    in eval mode on ``device``, its attention through our backends (:func:`use_bridge`) and its
    layers named (:func:`name_layers`).

    Raises:
        FolderError: transformers could not load it (its own message quoted).
    """
    try:
        model = model_class.from_pretrained(
            folder, local_files_only=True, dtype=torch.float32, **kwargs
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise FolderError(f"transformers could not load it ({type(exc).__name__}: {exc})") from None
    model = model.to(device).eval()
    use_bridge(model)
    name_layers(model)
    return model
