"""Flat memory under varied shapes: bounded kernel caches, and freed memory given back to the OS.

Two things made the resident set creep up under traffic of varied lengths (every padded length
is a new tensor shape); ``loadtest/soak.py`` measures both.

**Kernel caches.** The fused linear layers (:mod:`models.text.network.fused_linear`) run oneDNN matmul
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

**Freed memory kept between trims.** Left to itself, glibc serves every block over its mmap
threshold (128 KiB, raised only as far as the largest block freed so far) with a fresh ``mmap``
and gives the top of its heap back as soon as 128 KiB there are free, so the activations of the
next forward pass start on new pages: over a thousand page faults per long-context forecast
(``[4, 2048, 44]`` feature maps and the like), a few milliseconds each time. Since the
periodic trim already decides when memory goes back, :func:`retain_freed_memory` tells glibc to
keep blocks up to :data:`MMAP_THRESHOLD` in its heaps and not to shrink them by itself
(``mallopt``; the ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` environment variables,
when set, win). Blocks over the threshold (exact attention's score matrices at long lengths)
are still mapped and unmapped on their own.

**Arenas.** glibc gives each thread that allocates concurrently an arena of its own, up to eight
per core, and ``malloc_trim`` can give back only whole free pages of each: the request threads
that tokenise large texts (and the tokenizer's own threads) leave many half-used arenas whose
free space stays resident. :func:`limit_arenas` caps them at :data:`ARENA_MAX` (the
``MALLOC_ARENA_MAX`` environment variable, when set, wins); the freed memory then sits in a few
arenas, where the trim returns it (``benchmarks/service/attacks_memory.py`` measures both).

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
    libc = _glibc()
    if libc is None:
        return None
    trim = libc.malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


# mallopt parameters (malloc.h) and what retain_freed_memory and limit_arenas set them to.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
# A server process runs one torch thread per core it owns: few threads allocate at once.
ARENA_MAX = 2
MMAP_THRESHOLD = 32 * 2**20  # glibc's own ceiling for its dynamic threshold (64-bit)
TRIM_THRESHOLD = 2**30  # in effect: never shrink on free(); the periodic trim does it
MALLOPT_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when glibc is the allocator in use, else None."""
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
        libc = ctypes.CDLL(path)
    except OSError:
        return None
    glibc = hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt")  # glibc's own extensions
    return libc if glibc else None


def retain_freed_memory() -> bool:
    """Keep freed blocks up to :data:`MMAP_THRESHOLD` in glibc's heaps until the next
    :func:`trim` (see the module docstring); True if the settings were changed. Does nothing
    under another allocator or when the environment sets glibc's thresholds itself."""
    libc = _glibc()
    if libc is None or any(name in os.environ for name in MALLOPT_VARIABLES):
        return False
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def limit_arenas(count: int = ARENA_MAX) -> bool:
    """Cap glibc's malloc arenas at ``count`` (see the module docstring); True if set. Does
    nothing under another allocator or when ``MALLOC_ARENA_MAX`` is in the environment. Threads
    that already own an arena keep it: call this before the request threads start."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(libc.mallopt(M_ARENA_MAX, count))


def can_trim() -> bool:
    """True when :func:`trim` can return memory (glibc is the allocator)."""
    return _glibc_trim() is not None


def trim() -> bool:
    """Return the free pages of every malloc arena to the kernel; True if anything was."""
    function = _glibc_trim()
    return bool(function(0)) if function is not None else False
