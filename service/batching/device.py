"""The device a process serves on: selection, the inference context, memory readings, OOM.

The only module of ``service/`` besides the servables that touches torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from models.attention import get_backend


def select_device(setting: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is a start-up error."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was requested but torch sees no CUDA device")
    return torch.device(setting)


def configure_threads(n: int) -> None:
    """Set torch's intra-op thread count (process-wide); 0 keeps torch's default."""
    if n > 0:
        torch.set_num_threads(n)


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a device out-of-memory error (``torch.OutOfMemoryError``, raised by CUDA's
    allocator; tests raise it on CPU to exercise the split-and-retry path)."""
    return isinstance(exc, torch.OutOfMemoryError)


@dataclass
class DeviceRuntime:
    """How batches run on one device.

    Attributes:
        device: the device every model of this process lives on.
        autocast: on CUDA, run under bf16 (fp16 where bf16 is unsupported) autocast for backends
            that accept that dtype; on CPU models run in their own dtype (float32).
    """

    device: torch.device
    autocast: bool = True

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast_dtype(self, backend: str) -> torch.dtype | None:
        """The autocast dtype for ``backend`` on this device, or None for none."""
        if not (self.is_cuda and self.autocast):
            return None
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return dtype if dtype in get_backend(backend).capabilities.dtypes else None

    @contextlib.contextmanager
    def inference(self, backend: str) -> Iterator[None]:
        """``torch.inference_mode`` plus autocast where allowed."""
        dtype = self.autocast_dtype(backend)
        with torch.inference_mode():
            if dtype is None:
                yield
            else:
                with torch.autocast(device_type="cuda", dtype=dtype):
                    yield

    def reset_peak(self) -> None:
        if self.is_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_bytes(self) -> int | None:
        """Peak allocated bytes since :meth:`reset_peak` (None on CPU)."""
        return int(torch.cuda.max_memory_allocated(self.device)) if self.is_cuda else None

    def allocated_bytes(self) -> float:
        return float(torch.cuda.memory_allocated(self.device)) if self.is_cuda else 0.0

    def reserved_bytes(self) -> float:
        return float(torch.cuda.memory_reserved(self.device)) if self.is_cuda else 0.0

    def after_out_of_memory(self) -> None:
        """Give cached blocks back so the retried halves have room."""
        if self.is_cuda:
            torch.cuda.empty_cache()
