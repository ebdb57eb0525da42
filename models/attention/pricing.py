"""What one attention call costs before it runs: the call's shape, the units, shared helpers.

Every backend file prices itself beside its kernel, with two functions on its
:class:`~models.attention.base.Backend` record, both taking an :class:`AttentionCall` and the
backend's resolved options:

``memory(call, options) -> int``: peak bytes.
    The most bytes of tensors the kernel holds at any one moment while it runs, in inference
    mode (nothing kept for a backward pass), *beyond* its inputs ``q``, ``k``, ``v`` (the
    caller holds those) and including its output. Each function follows its kernel top-down and
    names the tensors alive at the kernel's busiest moment, so when a kernel changes, its
    estimate is the paragraph to revisit. ``tests/unit/test_attention_memory.py`` measures every
    backend with the torch allocator's own events (:mod:`models.profiling`) and holds ``full``
    within 15 % of the measured peak and the others within 2x either way. Half precision is
    priced as the server runs it on CUDA, under autocast: ``full``'s softmax comes out in
    float32, and the approximate backends compute in float32 whatever their input
    (:func:`in_float32`).

``work(call, options) -> float``: flop-equivalents.
    Two per multiply-add of a dense layer's product (:data:`MATMUL`; :data:`HEAD_MATMUL` in the
    per-head products of attention), plus :data:`ELEMENTWISE` per element of an elementwise
    pass (``exp``, softmax, masking, gathers, the ``1/√d`` scale). Elementwise passes are bound
    by memory traffic, not arithmetic, so one element costs far more than one multiply-add of a
    product; without that weight, ``performer``'s feature maps (an ``exp`` over
    ``[b, h, L, m]``) and ``full``'s softmax would look nearly free. The service turns work into
    seconds with a rate per backend measured on its own device at start-up
    (``service/engine/batching/cost.py``), so only the *ratios* between two calls of one backend
    matter: how cost grows with rows, length and options. ``benchmarks/attention/cost_model.py``
    prints estimated against measured time.

The public entry points, which validate the options and fill in their defaults first, are
:func:`models.attention.attention_bytes` and :func:`models.attention.attention_work`.

This module imports no torch, so code that only prices calls stays light.

Dimension legend (as :mod:`models.attention.base`): ``b`` batch, ``h`` heads, ``Lq``/``Lk``
query/key length (``L`` either), ``d`` head dimension, ``m`` features / landmarks, ``U``
sampled keys, ``u`` active queries.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOAT32 = 4  # bytes
INDEX = 8  # bytes of an int64 position or index
MATMUL = 2  # flops per multiply-add of a dense layer's product
# Per-head products (one side as narrow as the head dimension) run at a fraction of a dense
# layer's speed; measured on CPU, Performer's feature products cost about 2.5x their flops
# relative to the model's dense layers (benchmarks/results/cost-model-cpu.md).
HEAD_MATMUL = 5
ELEMENTWISE = 16  # flop-equivalents per element of a memory-bound elementwise pass


@dataclass(frozen=True)
class AttentionCall:
    """The shape of one attention call.

    Attributes:
        b, h, lq, lk, d: batch, heads, query length, key length, head dimension.
        itemsize: bytes per element of ``q``/``k``/``v`` (4 for float32, 2 for bf16/fp16).
        causal: query ``i`` sees keys ``j <= i``.
        padded: a key padding mask is passed (padded text batches).
        device_type: ``cpu`` or ``cuda`` (CPU kernels keep per-thread buffers).
    """

    b: int
    h: int
    lq: int
    lk: int
    d: int
    itemsize: int = FLOAT32
    causal: bool = False
    padded: bool = False
    device_type: str = "cpu"

    @property
    def scores(self) -> int:
        """Elements of one ``[b, h, Lq, Lk]`` score matrix."""
        return self.b * self.h * self.lq * self.lk

    @property
    def queries(self) -> int:
        """Elements of ``q`` (and of the output): ``b·h·Lq·d``."""
        return self.b * self.h * self.lq * self.d

    @property
    def keys(self) -> int:
        """Elements of ``k`` (and of ``v``): ``b·h·Lk·d``."""
        return self.b * self.h * self.lk * self.d

    @property
    def heads(self) -> int:
        """``b·h``: the batch of matrices every kernel works on."""
        return self.b * self.h


def in_float32(call: AttentionCall) -> tuple[int, int]:
    """(working itemsize, bytes of the float32 copies of q, k, v) for kernels that compute in
    float32 (or float64) whatever their input (:func:`models.attention.base.working_precision`)."""
    work = max(call.itemsize, FLOAT32)
    cast = 0 if call.itemsize >= FLOAT32 else (call.queries + 2 * call.keys) * work
    return work, cast


def dense_work(tokens: int, fan_in: int, fan_out: int) -> float:
    """A linear layer on ``tokens`` rows: the product and its bias/activation pass."""
    return MATMUL * tokens * fan_in * fan_out + ELEMENTWISE * tokens * fan_out
