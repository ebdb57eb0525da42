"""Flat memory under varied shapes: bounded kernel caches, and freed memory given back to the OS.

Two things made the resident set creep up under traffic of varied lengths (every padded length
is a new tensor shape); ``loadtest/soak.py`` measures both.

**Kernel caches.** The fused linear layers (:mod:`models.text.fused_linear`) run oneDNN matmul
primitives, and PyTorch's oneDNN glue (ideep) and oneDNN itself each keep up to 1,024 of them,
one per input shape, with their buffers: resident memory grew by hundreds of MiB before the
caches filled. :func:`bound_kernel_caches` caps both at :data:`KERNEL_CACHE_CAPACITY` entries
(an evicted shape costs a primitive re-creation, well under a millisecond); it must run before
torch first uses oneDNN, so the service package calls it on import. A value already in the
environment wins.

**Freed memory.** glibc's allocator keeps what a batch freed in its heaps and arenas for reuse,
but a block sized for one shape rarely fits the next, so free space fragments. ``malloc_trim(0)`` returns every
free page of every arena to the kernel. The worker calls it after a batch when at least
``memory_trim_interval_s`` have passed since the last trim, on its own thread (off the event
loop), while no forward pass runs.

Under another allocator (jemalloc or tcmalloc preloaded with ``LD_PRELOAD``, which return memory
by their own decay rules) or a C library without ``malloc_trim`` (musl), this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from pathlib import Path

log = logging.getLogger("attnserve")

KERNEL_CACHE_CAPACITY = 64
# ideep's cache of oneDNN primitives (PyTorch), then oneDNN's own primitive cache.
KERNEL_CACHE_VARIABLES = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")


def bound_kernel_caches(capacity: int = KERNEL_CACHE_CAPACITY) -> None:
    """Cap the per-shape kernel caches (unless the environment already sets them)."""
    for name in KERNEL_CACHE_VARIABLES:
        os.environ.setdefault(name, str(capacity))


_MAPS = Path("/proc/self/maps")
_OTHER_ALLOCATORS = ("libjemalloc", "libtcmalloc", "libmimalloc")


@functools.cache
def _glibc_trim() -> ctypes._NamedFuncPointer | None:
    """glibc's ``malloc_trim`` when it is the allocator in use, else None."""
    try:
        maps = _MAPS.read_text()
    except OSError:
        maps = ""
    if any(name in maps for name in _OTHER_ALLOCATORS):
        return None
    path = ctypes.util.find_library("c")
    if path is None:
        return None
    try:
        trim = ctypes.CDLL(path).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def can_trim() -> bool:
    """True when :func:`trim` can return memory (glibc is the allocator)."""
    return _glibc_trim() is not None


def trim() -> bool:
    """Return the free pages of every malloc arena to the kernel; True if anything was."""
    function = _glibc_trim()
    return bool(function(0)) if function is not None else False
