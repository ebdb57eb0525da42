"""What the batcher and the routes need from a loaded model, whatever its task.

A servable wraps one model object from ``models/`` (which knows tensors) and speaks in plain
Python values: token id lists, windows, lists of floats. Routes use these methods and never touch
torch themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from models.attention import BACKENDS, AttentionError


@runtime_checkable
class Servable(Protocol):
    """A loaded model the server can batch for."""

    name: str
    task: str  # "encode" or "forecast"
    default_attention: str

    def backends(self) -> list[str]:
        """Backends this model serves on its device (warmed up at start-up)."""
        ...

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Canonical options for ``backend`` (defaults filled, derived ones left out).

        Raises:
            AttentionError: unknown backend or option, out-of-range value, or a backend that
                cannot run this model on its device (the message gives the reason).
        """
        ...

    def run(
        self, rows: list[Any], backend: str, options: dict[str, Any], variant: tuple[Any, ...]
    ) -> list[Any]:
        """One output per row, in order (called on the worker thread, under inference mode)."""
        ...

    def memory_estimate(self, backend: str, options: dict[str, Any], rows: int, length: int) -> int:
        """Estimated peak activation memory, in bytes, of :meth:`run` on ``rows`` rows of
        ``length`` tokens / time steps with ``backend`` and its canonical ``options`` (the
        batcher keeps batches under its memory budget with it)."""
        ...

    def warmup_rows(self) -> tuple[list[Any], tuple[Any, ...]]:
        """A small valid batch (rows, variant) used to warm up every backend."""
        ...

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], tuple[Any, ...]]]:
        """The batches (rows, variant) to run before ready: one small batch, or for a compiled
        backend one per shape it will see (so no graph compiles while serving)."""
        ...

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        """``torch.compile`` the forward for those of ``backends`` this model serves."""
        ...

    def card(self) -> dict[str, Any]:
        """The model card served at ``GET /models``."""
        ...


def canonical_options(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """Resolved options without the ``None`` ones ("derive from the input"), so that ``{}`` and
    the spelled-out defaults batch together and pass validation again downstream."""
    return {k: v for k, v in sorted(resolved.items()) if v is not None}


def accepted_backends(check: Callable[[str, dict[str, Any] | None], Any]) -> list[str]:
    """The backends (in registry order) that ``check(backend, None)`` accepts on this model."""
    accepted = []
    for backend in BACKENDS:
        try:
            check(backend, None)
        except AttentionError:
            continue
        accepted.append(backend)
    return accepted


class TextModel(Servable, Protocol):
    """A servable for ``/encode`` and ``/v1/embeddings``."""

    dim: int
    max_tokens: int

    def tokenize(self, texts: list[str], truncate: bool) -> list[list[int]]:
        """Token ids per text; ``ModelInputError`` for a text over the limit without truncate."""
        ...


class ForecastModel(Servable, Protocol):
    """A servable for ``/forecast``."""

    context: int
    horizon: int

    def check_horizon(self, horizon: int | None) -> int:
        """The horizon to return; ``ModelInputError`` when out of range."""
        ...

    def prepare(self, series: list[Mapping[str, Any]]) -> list[Any]:
        """Validated windows, one per series (``timestamps`` or ``start``, ``values`` or
        ``columns``); ``ModelInputError`` naming the series."""
        ...

    def cut(self, forecast: Any, horizon: int) -> dict[str, Any]:
        """One forecast's first ``horizon`` steps as a response dict."""
        ...
