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
  kernels). The activation scale is taken over the whole packed batch, so an int8 row depends a
  little on its batch neighbours (bounded: ``tests/service/test_precision.py``). Layers named in
  ``keep_float`` stay float32.
- ``float16``: weights and activations in float16, CUDA only (CPU matmuls in float16 are
  emulated).

No module of ``service/`` is imported here.
"""

from __future__ import annotations

import copy
import platform
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from models.names import DEFAULT_PRECISION, PRECISION_NAMES

__all__ = [
    "DEFAULT_PRECISION",
    "DTYPES",
    "PRECISION_NAMES",
    "PrecisionError",
    "check_precisions",
    "native_bf16",
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


def quantize_int8(model: nn.Module, keep_float: Iterable[str] = ()) -> nn.Module:
    """A copy of ``model`` (float32) with its ``nn.Linear`` layers dynamically quantized to int8,
    weights per output channel; layers whose dotted name matches a pattern in ``keep_float``
    stay float32. The original is not modified.

    Per-channel weight scales: one scale per output row keeps small rows from being rounded to a
    few levels by the largest row's range (Krishnamoorthi 2018, "Quantizing deep convolutional
    networks for efficient inference", section 3.1); measured on all-MiniLM-L6-v2 it lifts the
    min cosine to float32 (benchmarks/results/precision-cpu.md).
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    keep = tuple(keep_float)
    spec = {
        name: per_channel_dynamic_qconfig
        for name, module in model.named_modules()
        if type(module) is nn.Linear and not matches(name, keep)
    }
    with warnings.catch_warnings():
        # torch.ao.quantization's eager API warns that it moves to torchao; it is still
        # torch's shipped dynamic quantization, and torchao is not a dependency.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized = quantize_dynamic(copy.deepcopy(model), spec, dtype=torch.qint8)
    return quantized


def convert(model: nn.Module, precision: str, keep_float: Iterable[str] = ()) -> nn.Module:
    """A copy of float32 ``model`` in ``precision`` (``float32`` returns ``model`` itself)."""
    if precision == DEFAULT_PRECISION:
        return model
    if precision == "int8":
        return quantize_int8(model, keep_float)
    return copy.deepcopy(model).to(DTYPES[precision])
