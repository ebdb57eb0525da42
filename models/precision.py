"""Numeric precisions a loaded model can run in, beside its float32 weights.

- ``float32``: the weights as trained; every exactness contract is stated for it.
- ``bfloat16``: weights and activations in bfloat16 (8 exponent bits, so no overflow handling;
  7 mantissa bits). On CPU it pays only where the CPU multiplies bfloat16 natively: AVX-512 BF16
  (``vdpbf16ps``) or AMX-BF16 tiles, which oneDNN uses for bfloat16 matmuls. Without them oneDNN
  emulates it in float32 (slower than float32), so :func:`check_precisions` refuses it there.
- ``int8``: dynamic quantization of the linear layers (weights int8 per output channel, each
  activation tensor quantized at run time with its own scale; Jacob et al., CVPR 2018, "Quantization
  and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference"), via
  ``torch.ao.quantization.quantize_dynamic`` with ``per_channel_dynamic_qconfig`` (fbgemm/x86
  kernels, oneDNN's where the CPU has 8-bit dot products). The activation scale is taken over
  the whole packed batch, so an int8 row depends a little on its batch neighbours (bounded:
  ``tests/service/test_precision.py``). Where calibration inputs are given, each layer's input
  channels are first smoothed (SmoothQuant) so outlier channels do not take the whole 8-bit
  range. Layers named in ``keep_float`` stay float32.
- ``float16``: weights and activations in float16, CUDA only (CPU matmuls in float16 are
  emulated).

No module of ``service/`` is imported here.
"""

from __future__ import annotations

import copy
import platform
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from models.names import DEFAULT_PRECISION, PRECISION_NAMES

__all__ = [
    "DEFAULT_PRECISION",
    "DTYPES",
    "PRECISION_NAMES",
    "PrecisionError",
    "check_precisions",
    "convert_network",
    "input_ranges",
    "native_bf16",
    "needs_conversion",
    "precision_of",
    "quantize_int8",
]

# The dtype weights and activations take; int8 keeps float32 activations (dynamic quantization
# quantizes each linear layer's input inside the layer).
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "int8": torch.float32,
    "float16": torch.float16,
}

# /proc/cpuinfo flags that mean native bfloat16 arithmetic: AVX-512 BF16 (Cooper Lake, Zen 4 and
# later) or AMX-BF16 (Sapphire Rapids and later); on Arm, the BF16 extension (Armv8.6-A).
_X86_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
_ARM_BF16_FEATURES = frozenset({"bf16"})


class PrecisionError(ValueError):
    """A precision this device cannot serve well (the message says why and what to do)."""


def _cpu_flags(cpuinfo: Path) -> set[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo`` (x86 ``flags``, Arm ``Features``), None
    when the file is missing (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether this CPU multiplies bfloat16 natively; None when it cannot tell (no
    ``/proc/cpuinfo``; Apple silicon from M2 on has BF16, but sysctl is not asked here).

    ``torch.backends.cpu.get_cpu_capability()`` is not used: it names the ATen kernel set
    ("AVX512"), which is the same on CPUs with and without AVX-512 BF16, and
    ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is True wherever oneDNN can emulate it.
    """
    flags = _cpu_flags(cpuinfo)
    if flags is None:
        return None
    if platform.machine().lower() in ("aarch64", "arm64"):
        return bool(flags & _ARM_BF16_FEATURES)
    return bool(flags & _X86_BF16_FLAGS)


def check_precisions(precisions: Iterable[str], device: torch.device | str) -> None:
    """Refuse, before any model loads, a precision this device would serve badly.

    Raises:
        PrecisionError: an unknown name; float16 on a CPU; bfloat16 on a CPU without native
            bfloat16 arithmetic (it would run slower than float32, silently).
    """
    kind = torch.device(device).type
    for p in precisions:
        if p not in PRECISION_NAMES:
            raise PrecisionError(f"unknown precision {p!r}; valid: {', '.join(PRECISION_NAMES)}")
        if p == "float16" and kind != "cuda":
            raise PrecisionError(
                "precision float16 needs a CUDA device (on CPU float16 matmuls are emulated, "
                "slower than float32); use bfloat16 or int8 on CPU, or drop float16 from "
                "precisions"
            )
        if p == "int8" and kind == "cuda":
            raise PrecisionError(
                "precision int8 runs on CPU only (torch's dynamic quantization has CPU kernels "
                "only); use float16 or bfloat16 on CUDA"
            )
        if p == "bfloat16" and kind == "cpu" and native_bf16() is False:
            raise PrecisionError(
                "precision bfloat16: this CPU has no native bfloat16 arithmetic (no avx512_bf16 "
                "or amx_bf16 flag in /proc/cpuinfo), so oneDNN would emulate it, slower than "
                "float32; drop bfloat16 from precisions (int8 may pay here instead)"
            )


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether module ``name`` (dotted) matches one of ``patterns`` (regular expressions,
    searched anywhere in the name)."""
    return any(re.search(p, name) for p in patterns)


# SmoothQuant's migration strength (Xiao et al., ICML 2023, "SmoothQuant", section 4.2): how
# much of an input channel's range moves into the weights. Measured on all-MiniLM-L6-v2 over 0.5
# to 0.95 (benchmarks/results/precision-cpu.md): 0.85 gave the best min cosine to float32.
SMOOTH_ALPHA = 0.85
# CPU flags of 8-bit dot-product instructions: there oneDNN's int8 GEMM (AVX-512 VNNI, AMX) beats
# fbgemm's; without them the default engine stays.
_INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


class SmoothedLinear(nn.Module):
    """``linear(x / s)`` with ``s`` folded into ``linear``'s weights (``W diag(s)``): the same
    map, but outlier input channels shrunk before the activation is quantized per tensor, so the
    other channels keep their resolution (SmoothQuant, Xiao et al., ICML 2023, section 4)."""

    def __init__(self, linear: nn.Module, inv_scale: torch.Tensor) -> None:
        super().__init__()
        self.linear = linear
        self.inv_scale: torch.Tensor
        self.register_buffer("inv_scale", inv_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inv_scale)


class _Probe(nn.Module):
    """Records the largest ``|x|`` per input channel seen by a linear layer."""

    def __init__(self, linear: nn.Linear, seen: dict[str, torch.Tensor], name: str) -> None:
        super().__init__()
        self.linear, self.seen, self.name = linear, seen, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        peak = x.detach().abs().reshape(-1, x.shape[-1]).amax(0).float()
        before = self.seen.get(self.name)
        self.seen[self.name] = peak if before is None else torch.maximum(before, peak)
        return self.linear(x)


def _linear_children(model: nn.Module) -> list[tuple[nn.Module, str, str]]:
    """(parent, attribute, dotted name) of every plain ``nn.Linear`` in ``model``."""
    return [
        (parent, child, f"{name}.{child}" if name else child)
        for name, parent in model.named_modules()
        for child, module in parent.named_children()
        if type(module) is nn.Linear
    ]


def input_ranges(model: nn.Module, run: Callable[[nn.Module], object]) -> dict[str, torch.Tensor]:
    """Per linear layer (by dotted name), the largest ``|input|`` per input channel while
    ``run(copy)`` runs a copy of ``model`` on calibration data. The copy's linear layers are
    wrapped, so code that reads ``nn.Linear`` weights directly (fused kernels) calls the wrapper
    as a module instead."""
    seen: dict[str, torch.Tensor] = {}
    probed = copy.deepcopy(model)
    for parent, child, name in _linear_children(probed):
        setattr(parent, child, _Probe(getattr(parent, child), seen, name))
    run(probed)
    return seen


def int8_engine() -> str:
    """The quantized engine whose packed weights run fastest here: ``onednn`` on CPUs with 8-bit
    dot products (VNNI, AMX), measured faster than fbgemm there; torch's default elsewhere."""
    flags = _cpu_flags(Path("/proc/cpuinfo")) or set()
    if "onednn" in torch.backends.quantized.supported_engines and flags & _INT8_DOT_FLAGS:
        return "onednn"
    return str(torch.backends.quantized.engine)


def quantize_int8(
    model: nn.Module,
    keep_float: Iterable[str] = (),
    input_absmax: Mapping[str, torch.Tensor] | None = None,
    alpha: float = SMOOTH_ALPHA,
) -> nn.Module:
    """A copy of ``model`` (float32) with its ``nn.Linear`` layers dynamically quantized to int8,
    weights per output channel; layers whose dotted name matches a pattern in ``keep_float``
    stay float32. The original is not modified.

    Per-channel weight scales: one scale per output row keeps small rows from being rounded to a
    few levels by the largest row's range (Krishnamoorthi 2018, "Quantizing deep convolutional
    networks for efficient inference", section 3.1). With ``input_absmax`` (from
    :func:`input_ranges`), each layer named there is smoothed first (:class:`SmoothedLinear`,
    ``s_j = max|x_j|^alpha / max|W_j|^(1 - alpha)``).
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    keep = tuple(keep_float)
    quantized = copy.deepcopy(model)
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = int8_engine()  # the weights are packed for it
    try:
        with warnings.catch_warnings():
            # torch.ao.quantization's eager API warns that it moves to torchao; it is still
            # torch's shipped dynamic quantization, and torchao is not a dependency.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            for parent, child, name in _linear_children(quantized):
                if matches(name, keep):
                    continue
                layer: nn.Linear = getattr(parent, child)
                peak = (input_absmax or {}).get(name)
                if peak is None:
                    plain = _dynamic(
                        nn.Sequential(layer), quantize_dynamic, per_channel_dynamic_qconfig
                    )
                    setattr(parent, child, plain)
                    continue
                weight = layer.weight.detach().float()
                scale = peak.clamp(min=1e-5) ** alpha / weight.abs().amax(0).clamp(min=1e-5) ** (
                    1 - alpha
                )
                smoothed = nn.Linear(layer.in_features, layer.out_features, layer.bias is not None)
                smoothed.weight = nn.Parameter(weight * scale, requires_grad=False)
                if layer.bias is not None:
                    smoothed.bias = nn.Parameter(layer.bias.detach().float(), requires_grad=False)
                packed = _dynamic(
                    nn.Sequential(smoothed), quantize_dynamic, per_channel_dynamic_qconfig
                )
                setattr(parent, child, SmoothedLinear(packed, 1.0 / scale))
    finally:
        torch.backends.quantized.engine = engine
    return quantized


def _dynamic(wrapped: nn.Sequential, quantize: Any, qconfig: Any) -> nn.Module:
    """The one linear layer in ``wrapped``, dynamically quantized."""
    out: nn.Sequential = quantize(wrapped, {"0": qconfig}, dtype=torch.qint8)
    return out[0]


def precision_of(dtype: torch.dtype) -> str:
    """The precision name of weights loaded in floating ``dtype`` (``torch.bfloat16`` ->
    ``bfloat16``); int8 copies say so themselves, their float parts being float32."""
    return str(dtype).removeprefix("torch.")


def needs_conversion(current: str, target: str) -> bool:
    """Whether a model loaded in ``current`` must be converted to serve ``target``: False when
    they agree; conversions start from float32 only.

    Raises:
        ValueError: ``current`` is not float32, or ``target`` is not a known precision.
    """
    if target == current:
        return False
    if current != DEFAULT_PRECISION:
        raise ValueError(f"convert from the float32 weights, not from {current}")
    if target not in PRECISION_NAMES:
        raise ValueError(f"unknown precision {target!r}; valid: {', '.join(PRECISION_NAMES)}")
    return True


def convert_network(
    net: nn.Module,
    precision: str,
    *,
    calibrate: Callable[[nn.Module], object] | None = None,
    keep_float: Iterable[str] = (),
    smooth: bool | Iterable[str] = True,
) -> nn.Module:
    """``net`` (float32) in ``precision``, whatever network it is; the original is not modified.

    - ``float32``: ``net`` itself.
    - ``bfloat16`` / ``float16``: a copy with every parameter and buffer in that dtype.
    - ``int8``: a copy with its linear layers quantized (:func:`quantize_int8`); layers whose
      dotted name matches a pattern in ``keep_float`` stay float32. With ``calibrate`` (called
      with a probed copy of ``net``, which it runs on calibration inputs) and ``smooth``, the
      layers' input ranges are measured first (:func:`input_ranges`) and each layer smoothed
      (SmoothQuant); ``smooth`` as patterns limits that to the layers they match.

    Raises:
        ValueError: an unknown precision.
    """
    if precision not in PRECISION_NAMES:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISION_NAMES)}")
    if precision == DEFAULT_PRECISION:
        return net
    if precision != "int8":
        return copy.deepcopy(net).to(DTYPES[precision])
    ranges = None
    if calibrate is not None and smooth:
        ranges = input_ranges(net, calibrate)
        if not isinstance(smooth, bool):
            only = tuple(smooth)
            ranges = {name: peak for name, peak in ranges.items() if matches(name, only)}
    return quantize_int8(net, keep_float, ranges)
