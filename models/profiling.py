"""Measuring the peak memory a piece of torch code allocates (CPU), to check the estimates of
:func:`models.attention.attention_bytes` and friends in tests and benchmarks.

``tracemalloc`` does not see torch's allocations, and the resident set moves with the C
allocator's caching, so this reads the torch profiler's allocator events
(``profile_memory=True``): every allocation and free of a tensor's storage, in order. The
running sum's maximum is the most the code held at once beyond what it started with: the
quantity the estimates give. On CUDA, ``torch.cuda.max_memory_allocated`` says the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torch.profiler import ProfilerActivity, profile

T = TypeVar("T")


def allocated_peak(fn: Callable[[], T]) -> tuple[T, int]:
    """Run ``fn`` once; return its result and the peak bytes of CPU tensors it allocated (on
    this thread) above what was allocated when it started."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return result, peak
