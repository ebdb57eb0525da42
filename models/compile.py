"""Static shape buckets and ``torch.compile`` for serving.

A compiled forward is specialised to its input shapes (``dynamic=False``), so a server that
compiles must keep the shapes it sees few: each batch is padded up to the next *bucket* of batch
rows and one graph per (backend, bucket) is compiled during
warm-up, before the server reports ready. Batches larger than every bucket run eagerly rather than
compile a new graph in the middle of serving.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def bucket_for(n: int, buckets: Sequence[int]) -> int | None:
    """The smallest bucket >= ``n``; None when ``n`` is larger than every bucket."""
    return next((b for b in sorted(buckets) if b >= n), None)


def pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t`` with its last row repeated until it has ``rows`` rows (outputs of the copies are
    dropped by the caller)."""
    extra = rows - t.shape[0]
    if extra <= 0:
        return t
    return torch.cat([t, t[-1:].expand(extra, *t.shape[1:])], dim=0)


def compile_forward(
    fn: Callable[..., Any],
    graphs: int,
    mode: str = "default",
    compiler: str = "inductor",
    dynamic: bool = False,
) -> Callable[..., Any]:
    """``torch.compile(fn)``, allowing at least ``graphs`` specialisations.

    Args:
        fn: the module or method to compile.
        graphs: how many (backend, shape) graphs the caller will warm up; dynamo's recompile
            limit is raised to fit them (past the limit it would silently run eagerly).
        mode: a ``torch.compile`` mode (see :data:`COMPILE_MODES`).
        compiler: the ``torch.compile`` backend: ``inductor`` to generate kernels, ``aot_eager``
            to check that the forward traces without generating code (tests).
        dynamic: symbolic shapes instead of one graph per shape (for inputs, like packed text,
            whose sizes cannot be bucketed).
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, graphs + 8)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * graphs + 64)
    return torch.compile(
        fn, mode=None if mode == "default" else mode, backend=compiler, dynamic=dynamic
    )
