"""Linear layers with bias, GELU or residual add fused into the matmul, on CPU via oneDNN.

Eager ``nn.Linear`` on CPU is an MKL GEMM after a broadcast copy of the bias, and the GELU or
residual add that follows is one more pass over memory. oneDNN's matmul primitive applies both as
post-ops; PyTorch exposes it as ``torch.ops.mkldnn._linear_pointwise`` (the op Inductor's CPU
backend emits for linear + pointwise patterns, ``torch/_inductor/fx_passes/mkldnn_fusion.py``).
Measured here on 8192 x 384 activations: linear+GELU 1.3-2x faster, linear+residual ~1.2x.

It is a private op, so every function falls back to the eager expression when the op is missing
or fails a start-up probe, when the tensor is not a CPU float32/bfloat16 tensor, or when the batch
has fewer than :data:`MIN_ROWS` rows (there oneDNN's per-call set-up costs about what it saves).
The fused op pays from a few rows up, not only on long inputs: one short text is ~20 token rows,
and a batch of a few short texts is where a server spends its day (eager vs fused per row count:
``python -m benchmarks.text.fused_linear``). Results agree with eager to float rounding (~1e-6
relative).

Weights are packed once into oneDNN's blocked layout (``mkldnn._reorder_linear_weight``, what
Inductor's weight-prepack pass emits for CPU linears, same file) and the packed copy is kept
beside the layer: with plain ``[o, i]`` weights oneDNN reorders the whole weight matrix on every
call, which for one short text (a few dozen rows) costs a large share of the matmul itself
(``python -m benchmarks.text.batch_one``). The packed copy costs one more copy of each linear weight in
memory; it is rebuilt when the weight changes (new storage, in-place update or dtype).

Below :data:`MKL_MAX_ROWS` rows (one short text) on one thread (:mod:`models.text.serial`),
float32 layers without a GELU run on MKL's GEMM instead: with the weight laid out ``[i, o]`` in memory (MKL's no-transpose operand) it is faster
than oneDNN's packed matmul there, with the residual folded in as ``addmm_``'s beta = 1
(``python -m benchmarks.text.batch_one``). :func:`prepack` lays each float32 weight out that way: the
parameter stays ``[o, i]`` (a transposed view of ``[i, o]`` storage), so no extra copy is kept, and
every other path reads it through its strides as before.

A layer that is not a plain ``nn.Linear`` (an int8 dynamically quantized one, see
:mod:`models.precision`) runs as its own module: its weight is packed for its own kernel, and
GELU or the residual add follow it as separate ops.

Legend: ``t`` rows (tokens), ``i`` input features, ``o`` output features.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MIN_ROWS = 4
# Row counts up to this run plain/residual float32 linears on MKL's GEMM over the [i, o] weight.
MKL_MAX_ROWS = 64
_FUSED_DTYPES = (torch.float32, torch.bfloat16)
# Row count oneDNN is told to expect when it picks the packed layout; any row count runs on it.
PACK_ROWS_HINT = 32
# layer -> ((storage, version, dtype, shape) of the weight it was packed from, packed weight).
# Weak keys: a copy of a network (``copy.deepcopy`` for another precision) packs its own, and a
# dropped network frees its packed weights with it.
_PACKED: weakref.WeakKeyDictionary[nn.Linear, tuple[tuple[object, ...], Tensor]] = (
    weakref.WeakKeyDictionary()
)


def _probe() -> bool:
    """True when the fused op exists and matches eager on a tiny CPU input."""
    try:
        op = torch.ops.mkldnn._linear_pointwise
        if not torch.backends.mkldnn.is_available():
            return False
        gen = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(*s, generator=gen) for s in ((4, 8), (6, 8), (6,)))
        r = torch.randn(4, 6, generator=gen)
        with torch.inference_mode():
            ok = torch.allclose(
                op(x, w, b, "gelu", [], "none"), F.gelu(F.linear(x, w, b)), atol=1e-5
            )
            ok &= torch.allclose(op.binary(x, r, w, b, "add"), r + F.linear(x, w, b), atol=1e-5)
        return bool(ok)
    except (AttributeError, RuntimeError):
        return False


ENABLED: bool = _probe()  # tests switch it off to compare with eager


def _packed_weight(layer: nn.Linear) -> Tensor:
    """``layer.weight`` in oneDNN's blocked layout, packed on first use and when it changes."""
    w = layer.weight
    key = (w.data_ptr(), w._version, w.dtype, tuple(w.shape))
    hit = _PACKED.get(layer)
    if hit is not None and hit[0] == key:
        return hit[1]
    packed = torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous(), PACK_ROWS_HINT)
    _PACKED[layer] = (key, packed)
    return packed


def prepack(model: nn.Module) -> None:
    """Pack every plain linear weight of ``model`` now rather than on its first forward: the
    packed copies then exist from load on (the first request does not pay for them, and memory
    read after loading includes them rather than showing up in a batch's activation peak)."""
    if not ENABLED:
        return
    with torch.no_grad():
        for layer in model.modules():
            if not isinstance(layer, nn.Linear):
                continue
            w = layer.weight
            if w.device.type == "cpu" and w.dtype == torch.float32 and w.is_contiguous():
                # The same values, stored [i, o]: ``w.t()`` is then MKL's no-transpose operand.
                layer.weight = nn.Parameter(w.t().contiguous().t(), requires_grad=w.requires_grad)
            if w.device.type == "cpu" and w.dtype in _FUSED_DTYPES:
                _packed_weight(layer)


def _fused(x: Tensor) -> bool:
    # A torch.compile'd forward traces the plain ops instead: Inductor cannot lower this op
    # with symbolic shapes (torch 2.13: a LoweringException at the first compile), and it packs
    # and fuses the linear layers itself.
    return (
        ENABLED
        and not torch.compiler.is_compiling()
        and x.device.type == "cpu"
        and x.dtype in _FUSED_DTYPES
        and x.shape[0] >= MIN_ROWS
        and not torch.is_grad_enabled()
    )


def _mkl(x: Tensor, layer: nn.Linear) -> bool:
    """True when ``x`` is few enough rows for MKL over a weight :func:`prepack` laid out
    ``[i, o]`` (float32 CPU, inference, one thread: with more, each MKL call is one more OpenMP
    region to wake helpers for, where oneDNN's packed matmul stays ahead)."""
    w = layer.weight
    return (
        x.shape[0] <= MKL_MAX_ROWS
        and x.dtype == torch.float32
        and x.device.type == "cpu"
        and w.stride(0) == 1
        and not torch.is_grad_enabled()
        and torch.get_num_threads() == 1
    )


def linear(x: Tensor, layer: nn.Module) -> Tensor:
    """``layer(x)``: ``[t, i] -> [t, o]``."""
    if not isinstance(layer, nn.Linear):
        return layer(x)
    if _mkl(x, layer):
        w = layer.weight.t()  # [i, o], contiguous
        return x @ w if layer.bias is None else torch.addmm(layer.bias, x, w)
    if _fused(x):
        return torch.ops.mkldnn._linear_pointwise(
            x, _packed_weight(layer), layer.bias, "none", [], ""
        )
    return F.linear(x, layer.weight, layer.bias)


def linear_gelu(x: Tensor, layer: nn.Module) -> Tensor:
    """``gelu(layer(x))`` with the exact (erf) GELU: ``[t, i] -> [t, o]``."""
    if not isinstance(layer, nn.Linear):
        return F.gelu(layer(x))
    if _fused(x):
        return torch.ops.mkldnn._linear_pointwise(
            x, _packed_weight(layer), layer.bias, "gelu", [], "none"
        )
    return F.gelu(F.linear(x, layer.weight, layer.bias))


def residual_linear(x: Tensor, a: Tensor, layer: nn.Module) -> Tensor:
    """``x + layer(a)``: ``[t, o], [t, i] -> [t, o]``. May overwrite ``x``; use the result.

    Eager path: ``x += bias`` then one GEMM with beta = 1 (``addmm_``), which saves ``addmm``'s
    bias copy and a separate residual add. Fused path: oneDNN's binary-add post-op.
    """
    if not isinstance(layer, nn.Linear):
        return x.add_(layer(a))
    if _fused(a) and not _mkl(a, layer):
        return torch.ops.mkldnn._linear_pointwise.binary(
            a, x, _packed_weight(layer), layer.bias, "add"
        )
    if layer.bias is not None:
        x = x.add_(layer.bias)
    return x.addmm_(a, layer.weight.t())
