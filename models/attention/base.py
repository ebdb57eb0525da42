"""What every attention backend shares: the error type, option specs, capabilities, masks.

Dimension legend used across ``models/attention``:
    b  batch        h  heads        i  query position (Lq)
    j  key position (Lk)            d  head dimension   m  features / landmarks / samples

A backend is one file ``models/attention/<name>.py``: a pure function
``kernel(q, k, v, key_padding_mask, causal, **options)`` and a module-level
``BACKEND = Backend(name="<name>", order=<int>, ...)`` record that says what it supports, so a
caller can ask *before* running whether an input is acceptable (xformers'
``not_supported_reasons`` does the same), and what a call costs in bytes and arithmetic
(:mod:`models.attention.pricing`). The registry and :data:`models.names.BACKEND_NAMES` find the
files themselves: ``name`` and ``order`` must be literals there (``models/names.py`` reads them
without importing torch), and ``name`` is the file's name.

Conventions every backend follows:
    * ``key_padding_mask``: bool ``[b, Lk]``, True marks a real key, False a padded one.
    * ``causal``: query ``i`` sees keys ``j <= i`` (top-left aligned, as SDPA's ``is_causal``).
    * A query that can see no key at all gets a zero output row (never NaN).
    * ``attn_bias`` (only for backends whose capabilities say ``score_bias``): a float tensor
      broadcastable to ``[b, h, Lq, Lk]`` added to the scaled scores before the softmax, as an
      architecture's relative position bias is (Raffel et al. 2020, T5, section 2.1; MPNet).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from models.attention.pricing import AttentionCall


class AttentionError(ValueError):
    """An attention call that cannot run: unknown backend, bad option, unsupported input.

    The message is written for the caller (the service returns it in a 422 body).
    """


@dataclass(frozen=True)
class IntOption:
    """An integer option with an inclusive range; ``default=None`` means "derived from the input"."""

    default: int | None
    minimum: int
    maximum: int
    description: str

    def validate(self, backend: str, name: str, value: Any) -> int:
        # bool is an int subclass in Python; `True` as a feature count is a caller mistake.
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise AttentionError(
                    f"{backend}: option '{name}' must be an integer in "
                    f"[{self.minimum}, {self.maximum}], got {value!r}"
                )
        if not self.minimum <= value <= self.maximum:
            raise AttentionError(
                f"{backend}: option '{name}' must be in [{self.minimum}, {self.maximum}], got {value}"
            )
        return value

    def describe(self) -> dict[str, Any]:
        return {
            "type": "integer",
            "default": self.default,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "description": self.description,
        }


@dataclass(frozen=True)
class ChoiceOption:
    """A string option with a fixed set of values."""

    default: str
    choices: tuple[str, ...]
    description: str

    def validate(self, backend: str, name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            valid = ", ".join(repr(c) for c in self.choices)
            raise AttentionError(
                f"{backend}: option '{name}' must be one of {valid}, got {value!r}"
            )
        return value

    def describe(self) -> dict[str, Any]:
        return {
            "type": "string",
            "default": self.default,
            "enum": list(self.choices),
            "description": self.description,
        }


Option = IntOption | ChoiceOption


@dataclass(frozen=True)
class Capabilities:
    """What inputs a backend accepts."""

    causal: bool = True
    padding_mask: bool = True
    cross_attention: bool = True  # Lq != Lk
    causal_cross_attention: bool = True  # causal with Lq != Lk
    dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    devices: tuple[str, ...] = ("cpu", "cuda")
    max_head_dim: int | None = None
    # An additive score term (relative position bias) can only be honoured by a backend that
    # forms the scores it adds to; random features and landmarks approximate softmax(QKᵀ) alone.
    score_bias: bool = False
    # Grouped-query attention (Ainslie et al. 2023): keys and values with fewer heads than the
    # queries, each shared by a group of query heads, taken as they are (no copy per head).
    # :func:`~models.attention.attend` repeats them per head for a backend without it.
    grouped_kv: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "score_bias": self.score_bias,
            "grouped_kv": self.grouped_kv,
            "causal": self.causal,
            "padding_mask": self.padding_mask,
            "cross_attention": self.cross_attention,
            "causal_cross_attention": self.causal_cross_attention,
            "dtypes": [str(t).removeprefix("torch.") for t in self.dtypes],
            "devices": list(self.devices),
            "max_head_dim": self.max_head_dim,
        }


Kernel = Callable[..., Tensor]
# Peak bytes beyond q, k, v, and flop-equivalents, of one call with resolved options
# (the conventions are in models/attention/pricing.py).
MemoryModel = Callable[[AttentionCall, Mapping[str, Any]], int]
WorkModel = Callable[[AttentionCall, Mapping[str, Any]], float]


@dataclass(frozen=True)
class Backend:
    """A named attention backend: its kernel, what it supports, which options it takes and what
    a call costs.

    ``order`` places the backend in every listing (``BACKENDS``, tables, quality files): the
    backends are listed by ascending ``order``, which must be unique. ``memory`` and ``work``
    receive options already resolved by :meth:`resolve_options`.
    """

    name: str
    order: int
    exact: bool
    summary: str
    citation: str
    kernel: Kernel
    memory: MemoryModel
    work: WorkModel
    capabilities: Capabilities = field(default_factory=Capabilities)
    options: Mapping[str, Option] = field(default_factory=dict)
    # Extra device/dtype/option rules a capability table cannot express (e.g. SDPA fused
    # kernels); called with the input and the resolved options.
    extra_check: Callable[[InputSpec, Mapping[str, Any]], list[str]] | None = None
    # The integer option that buys accuracy with time (larger: closer to exact, slower), which
    # quality-against-time sweeps vary; None for the exact backends.
    budget: str | None = None

    def resolve_options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validate ``options`` and fill in defaults; raise :class:`AttentionError` if invalid."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            valid = ", ".join(sorted(self.options)) or "none"
            raise AttentionError(
                f"{self.name}: unknown option(s) {', '.join(map(repr, unknown))}; valid options: {valid}"
            )
        resolved: dict[str, Any] = {}
        for name, spec in self.options.items():
            resolved[name] = (
                spec.validate(self.name, name, options[name]) if name in options else spec.default
            )
        return resolved

    def unsupported_reasons(
        self, spec: InputSpec, options: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Readable reasons why this backend cannot take ``spec`` with ``options`` (resolved;
        None: the defaults); empty when it can."""
        caps, reasons = self.capabilities, []
        if spec.causal and not caps.causal:
            reasons.append(f"{self.name} has no causal (masked) variant")
        if spec.has_padding_mask and not caps.padding_mask:
            reasons.append(f"{self.name} does not support key padding masks")
        if spec.lq != spec.lk and not caps.cross_attention:
            reasons.append(f"{self.name} needs Lq == Lk (got Lq={spec.lq}, Lk={spec.lk})")
        if spec.causal and spec.lq != spec.lk and not caps.causal_cross_attention:
            reasons.append(
                f"{self.name} supports causal attention only with Lq == Lk "
                f"(got Lq={spec.lq}, Lk={spec.lk})"
            )
        if spec.dtype not in caps.dtypes:
            valid = ", ".join(str(t).removeprefix("torch.") for t in caps.dtypes)
            reasons.append(
                f"{self.name} does not support dtype {str(spec.dtype).removeprefix('torch.')}; "
                f"supported: {valid}"
            )
        if spec.device_type not in caps.devices:
            reasons.append(
                f"{self.name} does not run on device '{spec.device_type}'; "
                f"supported: {', '.join(caps.devices)}"
            )
        if spec.has_score_bias and not caps.score_bias:
            reasons.append(
                f"{self.name} cannot add this model's score bias (a relative position bias "
                "added to QKᵀ before the softmax): it approximates softmax(QKᵀ/√d) without "
                "forming the scores the bias is added to"
            )
        if caps.max_head_dim is not None and spec.head_dim > caps.max_head_dim:
            reasons.append(
                f"{self.name} supports head dimensions up to {caps.max_head_dim}, got {spec.head_dim}"
            )
        if self.extra_check is not None:
            resolved = self.resolve_options(None) if options is None else options
            reasons.extend(self.extra_check(spec, resolved))
        return reasons

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (served by ``GET /models``)."""
        return {
            "name": self.name,
            "exact": self.exact,
            "summary": self.summary,
            "citation": self.citation,
            "supports": self.capabilities.describe(),
            "options": {name: spec.describe() for name, spec in self.options.items()},
        }


@dataclass(frozen=True)
class InputSpec:
    """The facts about an attention input that decide whether a backend can run it."""

    lq: int
    lk: int
    head_dim: int
    dtype: torch.dtype
    device_type: str
    causal: bool = False
    has_padding_mask: bool = False
    has_score_bias: bool = False

    @classmethod
    def of(
        cls,
        q: Tensor,
        k: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        attn_bias: Tensor | None = None,
    ) -> InputSpec:
        return cls(
            has_score_bias=attn_bias is not None,
            lq=q.shape[-2],
            lk=k.shape[-2],
            head_dim=q.shape[-1],
            dtype=q.dtype,
            device_type=q.device.type,
            causal=causal,
            has_padding_mask=key_padding_mask is not None,
        )


# ----------------------------------------------------------------------------- mask helpers


def visible_keys(
    lq: int, lk: int, key_padding_mask: Tensor | None, causal: bool, device: torch.device
) -> Tensor | None:
    """Boolean ``[b or 1, 1, Lq or 1, Lk]`` mask of which keys each query may see (None: all).

    Materialises ``Lq x Lk`` only when ``causal`` is set; a padding mask alone stays ``[b,1,1,Lk]``.
    """
    mask: Tensor | None = None
    if key_padding_mask is not None:
        mask = key_padding_mask[:, None, None, :]
    if causal:
        tri = torch.ones(lq, lk, dtype=torch.bool, device=device).tril()[None, None]
        mask = tri if mask is None else mask & tri
    return mask


def masked_softmax(scores: Tensor, allowed: Tensor | None) -> Tensor:
    """Softmax of ``scores`` over the last dimension where ``allowed`` (broadcastable bool; None:
    everywhere), with zero rows for the queries allowed no key at all (never NaN)."""
    if allowed is None:
        return scores.softmax(dim=-1)
    # A finite fill instead of -inf: a row with no allowed key then softmaxes to a uniform row
    # (not NaN), and is zeroed after.
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1) * allowed.any(dim=-1, keepdim=True)


def zero_blind(out: Tensor, sees: Tensor) -> Tensor:
    """``out`` with zeros where ``sees`` (bool ``[..., Lq, 1]``: the query sees some key) is
    False; fused kernels return 0 or NaN there, depending on the kernel. On CPU the pass over
    ``out`` is skipped when every query sees a key, as in any padded batch of non-empty texts:
    asking costs a reduction over the small mask, where the pass costs a read and write of the
    whole output. On CUDA the answer would stall the stream, so the pass always runs there."""
    if out.device.type == "cpu" and bool(sees.all()):
        return out
    return torch.where(sees, out, torch.zeros((), dtype=out.dtype, device=out.device))


def working_precision(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q``, ``k``, ``v`` in float32 (float64 stays float64), for the approximate backends.

    Their numerically delicate steps (Performer's stabiliser and feature sums, Nyström's
    iterative pseudo-inverse, ProbSparse's sampled measure) lose too much in half precision; the
    caller casts its result back to the input dtype.
    """
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    return q.to(work), k.to(work), v.to(work)


def masked_mean_values(v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """Mean of ``v`` over real keys: ``[b, h, Lk, d] -> [b, h, 1, d]``; zeros for an all-pad row."""
    if key_padding_mask is None:
        return v.mean(dim=-2, keepdim=True)
    w = key_padding_mask[:, None, :, None].to(v.dtype)
    total = (v * w).sum(dim=-2, keepdim=True)
    count = w.sum(dim=-2, keepdim=True).clamp_min(1.0)
    return total / count


def repeat_kv_heads(x: Tensor, heads: int) -> Tensor:
    """Grouped keys or values ``[b, g, L, d]`` as ``[b, heads, L, d]``: group ``i`` serves query
    heads ``i * heads/g ... (i + 1) * heads/g - 1`` (transformers' ``repeat_kv`` order)."""
    groups = x.shape[1]
    return x if groups == heads else x.repeat_interleave(heads // groups, dim=1)
