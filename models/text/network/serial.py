"""Small forwards run on the calling thread alone when OpenMP's helper threads sleep between ops.

Every intra-op parallel region (each linear layer, LayerNorm and attention call of a forward) hands
a share of its work to OpenMP's helper threads, and the calling thread waits at the region's end
for the slowest of them. With ``OMP_WAIT_POLICY=PASSIVE`` (what ``attnserve serve`` exports by
default, ``service/engine/batching/cpus.py``) a helper goes to sleep as soon as a region ends, so
every region first waits for it to be woken: a futex wake, in a virtual machine an interrupt to a
halted vCPU, and on a CPU shared with other work the helper's next time slice. A forward over one
short text (a few dozen token rows) runs about 60 regions whose own work is tens to a few hundred
microseconds, so the wake-ups cost more than the second thread saves: such a forward is faster on
one thread (``python -m benchmarks.text.batch_one``; the crossover measured on this project's 2-vCPU
host was between 48 and 72 tokens). ONNX Runtime avoids the same cost differently: its
``ParallelFor`` lets the calling thread run the shards a sleeping helper has not started.

With helpers that spin between regions (``OMP_WAIT_POLICY`` unset or ``ACTIVE``) the wake-up is
not paid and every forward keeps all threads.

Legend: ``t`` token rows in one forward (all texts of the batch together).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Largest ``t`` run on one thread: one short text, or a few very short ones.
SERIAL_MAX_TOKENS = 64


def helpers_sleep() -> bool:
    """True when OpenMP helper threads sleep at once after each region (``OMP_WAIT_POLICY`` is
    ``PASSIVE``; the runtime read it when torch loaded, and the server sets it before that)."""
    return os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"


def forward_threads(tokens: int, device: str, threads: int, sleep: bool) -> int:
    """The threads a forward over ``tokens`` rows on ``device`` (a device type) should run on,
    ``threads`` being the count now and ``sleep`` :func:`helpers_sleep`: one for a short CPU
    forward where helpers sleep (see the module docstring), else ``threads``. The linear layers'
    kernel choice reads the result (:func:`models.text.network.fused_linear.choose_kernel`)."""
    if device == "cpu" and tokens <= SERIAL_MAX_TOKENS and sleep:
        return 1
    return threads


@contextmanager
def threads_for(tokens: int, device: torch.device) -> Iterator[None]:
    """Run the enclosed forward over ``tokens`` rows on :func:`forward_threads` threads;
    restores the count afterwards.

    ``torch.set_num_threads`` sets the calling thread's OpenMP thread count (the forward runs on
    that thread) and the default a thread starting torch work meanwhile would take; the server
    runs all its CPU torch work on one thread (``service/engine/batching/device.py``,
    ``torch_thread``), so no other forward sees the switch.
    """
    if torch.compiler.is_compiling():  # a compiled graph has no place for a thread switch
        yield
        return
    threads = torch.get_num_threads()
    inside = forward_threads(tokens, device.type, threads, helpers_sleep())
    if inside == threads:
        yield
        return
    torch.set_num_threads(inside)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
