"""The text models' linear layers, each call on the kernel :func:`choose_kernel` picks for it.

Three calls (:class:`Op`): ``layer(x)``, ``gelu(layer(x))`` and ``x + layer(a)``. Four kernels
(:class:`Kernel`):

- oneDNN's matmul primitive with bias, GELU or residual add fused in as post-ops, on a weight
  packed once into its blocked layout. PyTorch exposes it as ``torch.ops.mkldnn._linear_pointwise``
  (the op Inductor's CPU backend emits for linear + pointwise patterns,
  ``torch/_inductor/fx_passes/mkldnn_fusion.py``); eager ``nn.Linear`` on CPU is an MKL GEMM
  after a broadcast copy of the bias, and the GELU or residual add that follows is one more pass
  over memory (eager vs fused per row count: ``python -m benchmarks.text.fused_linear``,
  ``benchmarks/results/fused-linear-cpu.md``). It is a private op, so it is used only when it
  exists and passes a start-up probe (:data:`ENABLED`). Results agree with eager to float
  rounding (~1e-6 relative).
- MKL's GEMM on a weight laid out ``[i, o]`` in memory (its no-transpose operand), for a few
  rows on one thread, the residual folded in as ``addmm_``'s beta = 1.
- the eager expression, the reference.
- the layer's own forward, for a layer that is not a plain float ``nn.Linear`` (int8).

:func:`prepack` (called once when a model is built) prepares the weights: it lays each float32
weight out ``[i, o]`` (the parameter stays ``[o, i]``, a transposed view of ``[i, o]`` storage,
so no extra copy is kept and every other kernel reads it through its strides as before) and packs
oneDNN's copy (``mkldnn._reorder_linear_weight``, what Inductor's weight-prepack pass emits for
CPU linears): with plain weights oneDNN reorders the whole matrix on every call, which for one
short text costs a large share of the matmul itself (``python -m benchmarks.text.batch_one``).
The packed copy costs one more copy of each linear weight in memory; it is kept beside the layer
and rebuilt when the weight changes (new storage, in-place update or dtype).

Legend: ``t`` rows (tokens), ``i`` input features, ``o`` output features.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Fewer rows than this never run on oneDNN: its per-call set-up costs about what it saves there.
MIN_ROWS = 4
# Row counts up to this run plain/residual float32 linears on MKL's GEMM over the [i, o] weight.
MKL_MAX_ROWS = 64
_FUSED_DTYPES = (torch.float32, torch.bfloat16)
# Row count oneDNN is told to expect when it picks the packed layout; any row count runs on it.
PACK_ROWS_HINT = 32


class Op(enum.Enum):
    """What a call computes (``[t, i] -> [t, o]``)."""

    LINEAR = "linear"  # layer(x)
    GELU = "gelu"  # gelu(layer(x)), the exact (erf) GELU
    RESIDUAL = "residual"  # x + layer(a)


class Weight(enum.Enum):
    """How a layer holds its weight, which says what can read it (see :func:`weight_of`)."""

    ROWS = "[o, i]"  # a float nn.Linear as loaded
    COLUMNS = "[i, o]"  # a float32 nn.Linear after prepack: MKL's no-transpose operand
    MODULE = "module"  # no float weight to read: int8 (models.precision.quantize_int8) or wrapped


class Kernel(enum.Enum):
    """What runs a call; see :func:`choose_kernel`."""

    MODULE = "module"  # the layer's own forward; GELU or the residual add as separate ops
    MKL = "mkl"  # addmm over the [i, o] weight; residual: x += bias, x.addmm_(a, w.t())
    ONEDNN = "onednn"  # mkldnn._linear_pointwise on the packed weight, GELU / add as post-ops
    EAGER = "eager"  # F.linear (then F.gelu); residual: x += bias, x.addmm_(a, w.t())


def choose_kernel(
    op: Op,
    rows: int,
    dtype: torch.dtype,
    *,
    device: str,
    weight: Weight,
    threads: Callable[[], int],
    autograd: bool,
    compiling: bool,
    onednn: bool,
) -> Kernel:
    """The kernel a call runs: the first row of the table whose conditions all hold.

    ==========  =================================================  ============================
    kernel      when                                               why
    ==========  =================================================  ============================
    ``MODULE``  ``weight`` is ``MODULE`` (an int8 layer, or a      its weight is int8, packed
                wrapper such as int8 calibration's probe)          for its own kernel: nothing
                                                                   here can read it
    ``MKL``     not ``GELU``; ``rows <= MKL_MAX_ROWS``; float32;   one short text: ahead of
                CPU; ``weight`` ``COLUMNS`` (:func:`prepack`); no  oneDNN's packed matmul
                autograd; one thread                               (``batch-one-cpu.md``, one
                                                                   layer's products); with more
                                                                   threads each call is one
                                                                   more OpenMP region to wake
                                                                   helpers for, and a GELU one
                                                                   more pass (a post-op there)
    ``ONEDNN``  ``onednn``; not ``compiling``; CPU; float32 or     ahead of eager from
                bfloat16; ``rows >= MIN_ROWS``; no autograd        ``MIN_ROWS`` rows, behind
                                                                   below
                                                                   (``fused-linear-cpu.md``)
    ``EAGER``   anything else                                      the reference: few rows,
                                                                   other dtypes and devices,
                                                                   training; and a compiled
                                                                   forward (Inductor packs and
                                                                   fuses linears itself, and
                                                                   cannot lower the fused op
                                                                   with symbolic shapes: torch
                                                                   2.13, a LoweringException at
                                                                   the first compile)
    ==========  =================================================  ============================

    For a residual, MKL and eager run the same ops (:func:`residual_linear`), so MKL is told
    apart only where oneDNN would run otherwise. The conditions are tested in this order, and
    ``threads`` is called only where it decides: under ``torch.compile`` reading the thread
    count is a graph break, and comparing symbolic ``rows`` adds a guard.

    Figures: ``benchmarks/results/fused-linear-cpu.md`` (eager vs oneDNN per row count, 1 and 2
    threads) and ``benchmarks/results/batch-one-cpu.md`` (one short text).

    Args:
        op: what the call computes.
        rows: ``t``, rows of the input.
        dtype: the input's dtype (the precision of a float layer).
        device: the input's device type.
        weight: how the layer holds its weight (:func:`weight_of`).
        threads: the calling thread's OpenMP threads (``torch.get_num_threads``; one inside
            :func:`models.text.network.serial.threads_for` around a short forward where OpenMP helpers
            sleep, ``OMP_WAIT_POLICY=PASSIVE``).
        autograd: gradients are recorded (``torch.is_grad_enabled()``).
        compiling: ``torch.compile`` is tracing the call.
        onednn: the fused op exists and passed its probe (:data:`ENABLED`).
    """
    if weight is Weight.MODULE:
        return Kernel.MODULE
    fused = (
        onednn
        and not compiling
        and device == "cpu"
        and dtype in _FUSED_DTYPES
        and rows >= MIN_ROWS
        and not autograd
    )
    if op is Op.GELU or (op is Op.RESIDUAL and not fused):
        return Kernel.ONEDNN if fused else Kernel.EAGER
    if (
        rows <= MKL_MAX_ROWS
        and dtype == torch.float32
        and device == "cpu"
        and weight is Weight.COLUMNS
        and not autograd
        and threads() == 1
    ):
        return Kernel.MKL
    return Kernel.ONEDNN if fused else Kernel.EAGER


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


# The one setting: oneDNN's fused op is usable here (probed at import; tests switch it off to
# compare with eager). Off, :func:`prepack` leaves weights as they are.
ENABLED: bool = _probe()


def weight_of(layer: nn.Module) -> Weight:
    """How ``layer`` holds its weight: an int8 layer (``torch.ao`` dynamic quantization, alone or
    in SmoothQuant's wrapper, :mod:`models.precision`) is not an ``nn.Linear``, nor is a wrapper
    that must run as a module (int8 calibration's probe); a float one is ``[i, o]`` in memory
    once :func:`prepack` laid it out so."""
    if not isinstance(layer, nn.Linear):
        return Weight.MODULE
    return Weight.COLUMNS if layer.weight.stride(0) == 1 else Weight.ROWS


def _facts(x: Tensor, layer: nn.Module) -> dict[str, Any]:
    """What :func:`choose_kernel` needs to know besides the op, for ``layer`` on ``x`` now."""
    return {
        "rows": x.shape[0],
        "dtype": x.dtype,
        "device": x.device.type,
        "weight": weight_of(layer),
        "threads": torch.get_num_threads,  # read only where it decides (see choose_kernel)
        "autograd": torch.is_grad_enabled(),
        "compiling": torch.compiler.is_compiling(),
        "onednn": ENABLED,
    }


# layer -> ((storage, version, dtype, shape) of the weight it was packed from, packed weight).
# Weak keys: a copy of a network (``copy.deepcopy`` for another precision) packs its own, and a
# dropped network frees its packed weights with it.
_PACKED: weakref.WeakKeyDictionary[nn.Linear, tuple[tuple[object, ...], Tensor]] = (
    weakref.WeakKeyDictionary()
)


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
    """Prepare every plain linear weight of ``model`` for its kernels now rather than on its
    first forward: float32 weights laid out ``[i, o]`` (:attr:`Weight.COLUMNS`, same values and
    shape), and oneDNN's packed copy of float32/bfloat16 CPU weights made. The first request
    then does not pay for them, and memory read after loading includes the packed copies rather
    than showing them in a batch's activation peak. Nothing happens unless :data:`ENABLED`."""
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


def linear(x: Tensor, layer: nn.Module) -> Tensor:
    """``layer(x)``: ``[t, i] -> [t, o]``."""
    kernel = choose_kernel(Op.LINEAR, **_facts(x, layer))
    if kernel is Kernel.MODULE:
        return cast(Tensor, layer(x))
    plain = cast(nn.Linear, layer)
    if kernel is Kernel.MKL:
        w = plain.weight.t()  # [i, o], contiguous
        return x @ w if plain.bias is None else torch.addmm(plain.bias, x, w)
    if kernel is Kernel.ONEDNN:
        return torch.ops.mkldnn._linear_pointwise(
            x, _packed_weight(plain), plain.bias, "none", [], ""
        )
    return F.linear(x, plain.weight, plain.bias)


def linear_gelu(x: Tensor, layer: nn.Module) -> Tensor:
    """``gelu(layer(x))`` with the exact (erf) GELU: ``[t, i] -> [t, o]``."""
    kernel = choose_kernel(Op.GELU, **_facts(x, layer))
    if kernel is Kernel.MODULE:
        return F.gelu(layer(x))
    plain = cast(nn.Linear, layer)
    if kernel is Kernel.ONEDNN:
        return torch.ops.mkldnn._linear_pointwise(
            x, _packed_weight(plain), plain.bias, "gelu", [], "none"
        )
    return F.gelu(F.linear(x, plain.weight, plain.bias))


def residual_linear(x: Tensor, a: Tensor, layer: nn.Module) -> Tensor:
    """``x + layer(a)``: ``[t, o], [t, i] -> [t, o]``. May overwrite ``x``; use the result.

    MKL and eager run the same ops: ``x += bias`` then one GEMM with beta = 1 (``addmm_``),
    which saves ``addmm``'s bias copy and a separate residual add; over an ``[i, o]`` weight that
    GEMM is MKL's no-transpose one. oneDNN: its binary-add post-op.
    """
    kernel = choose_kernel(Op.RESIDUAL, **_facts(a, layer))
    if kernel is Kernel.MODULE:
        return x.add_(layer(a))
    plain = cast(nn.Linear, layer)
    if kernel is Kernel.ONEDNN:
        return torch.ops.mkldnn._linear_pointwise.binary(
            a, x, _packed_weight(plain), plain.bias, "add"
        )
    if plain.bias is not None:
        x = x.add_(plain.bias)
    return x.addmm_(a, plain.weight.t())
