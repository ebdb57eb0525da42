"""Request work that holds the GIL (tokenising, windowing, parsing, token listings, writing large
answers), run off the event loop on one helper thread, one piece at a time.

A thread keeps that work off the loop's own thread, but the GIL is still one: each thread that
wants it waits up to ``sys.getswitchinterval()`` for a turn, and with many such threads the
event loop waits for every one of them before it runs again. Starlette's thread pool takes up to
40 at once, so 16 clients sending large texts put 16 threads at the GIL and ``/healthz`` waited
hundreds of milliseconds (issue 50 item 4). Here that work queues for one thread, so the loop
shares the GIL with one other Python thread at most, and waits one switch interval per turn.
The torch threads release the GIL inside each kernel; the tokenizer's Rust parallelism runs
inside one call. Work small enough to run on the loop (see ``INLINE_TOKENIZE_CHARS``) never
queues here.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def cpu_thread() -> ThreadPoolExecutor:
    """The process's one thread for GIL-bound request work (created on first use)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="attnserve-cpu")
        return _pool


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on :func:`cpu_thread`, in the caller's context variables."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(cpu_thread(), call)
