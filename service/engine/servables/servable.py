"""What every servable does alike: its model in each loaded precision, the backends it serves,
its card and the calls a backend makes (the text and forecast servables build on it)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from models.attention import BACKENDS, AttentionError
from service.engine.servables.base import Call, Checked, OptionItems, option_items


class Servable(ABC):
    """What every servable does alike: its model in each loaded precision (the default first),
    the backends it serves, its card and the calls a backend makes.

    A subclass sets ``task``, adds the per-request hooks of
    :class:`~service.engine.servables.base.ServedModel`, says which calls its quality figures
    name (:meth:`figure_calls`) and, where its calls carry more than backend, options and
    precision, overrides :meth:`call`.

    Args:
        models: the model per loaded precision, the default first; each has ``name``,
            ``default_attention``, ``check_attention(backend, options)`` and ``card()``.
        aliases: other names clients may use for it (e.g. the sentence-transformers hub id).
        backends: the backends it serves, in registry order (:func:`accepted_backends`).
    """

    task: str
    # What the engine asks of every kind (:class:`~service.engine.servables.base.ServedModel`);
    # a kind that has one sets it, the others keep these.
    labels: tuple[str, ...] = ()
    max_tokens: int | None = None
    context: int | None = None
    extra_tasks: tuple[str, ...] = ()
    zero_shot: bool = False

    def __init__(
        self, models: Mapping[str, Any], aliases: tuple[str, ...], backends: list[str]
    ) -> None:
        self.models = dict(models)
        self.model = next(iter(self.models.values()))  # the default precision's copy
        self.name: str = self.model.name
        self.aliases = aliases
        self.default_attention: str = self.model.default_attention
        self._backends = backends

    def card(self) -> dict[str, Any]:
        """The model's own card plus what serving adds: its other names, the backends it serves
        and the precisions it is loaded in."""
        return {
            **self.model.card(),
            "aliases": list(self.aliases),
            "served_backends": self.backends(),
            "precisions": self.precisions(),
            "default_precision": self.precisions()[0],
        }

    @property
    def quality_task(self) -> str:
        """The task whose quality figures ``auto`` reads: the model's task unless a subclass
        measures another (a multi-vector model, served as ``encode``, measures its ranking)."""
        return self.task

    def backends(self) -> list[str]:
        """Backends this model serves on its device (warmed up at start-up)."""
        return list(self._backends)

    def over_token_cap(self, checked: Checked, cap: int) -> int | None:
        """Tokens counted past ``cap`` by a text model's long_text windows request; None
        for every other request (a forecaster has no tokens)."""
        return None

    def attention_fallback(self, call: Call) -> str | None:
        """Which layers ran another backend than ``call``'s, and why; None: every layer ran it
        (what every kind but a transformers text backbone's answers)."""
        return None

    def precisions(self) -> list[str]:
        """The precisions this model is loaded in, the default first."""
        return list(self.models)

    def call(self, backend: str, options: OptionItems, precision: str) -> Call:
        """The call of ``backend`` at resolved ``options`` in ``precision``."""
        return Call(backend, options, precision=precision)

    def default_call(self, backend: str, precision: str | None = None) -> Call:
        """``backend`` at its default options, in ``precision`` (None: the default precision)."""
        options = option_items(self.model.check_attention(backend, None))
        return self.call(backend, options, precision or self.precisions()[0])

    def measured_call(self, backend: str, options: Mapping[str, Any], precision: str) -> Call:
        """The call a quality figure was measured with: its options resolved as a request's
        would be (a ``None`` option was derived from the input, as the default is)."""
        given = {k: v for k, v in options.items() if v is not None}
        return self.call(
            backend, option_items(self.model.check_attention(backend, given)), precision
        )

    def measured_variants(self, backend: str) -> list[Call]:
        """Every loaded precision but the default at ``backend``'s defaults (warmed up and
        priced on its own: bfloat16 and int8 run other kernels), and every other call of
        ``backend`` with a quality figure (:meth:`figure_calls`)."""
        if backend not in self._backends:
            return []
        default = self.default_call(backend)
        calls = [self.default_call(backend, p) for p in self.precisions()[1:]]
        calls += self.figure_calls(backend)
        return [c for i, c in enumerate(calls) if c != default and c not in calls[:i]]

    @abstractmethod
    def figure_calls(self, backend: str) -> list[Call]:
        """The calls of ``backend`` its quality figures were measured with, in every loaded
        precision."""

    def compiled_copies(self, backends: list[str]) -> tuple[list[str], list[Any]]:
        """Those of ``backends`` this model serves, and the copies to ``torch.compile`` them in:
        every loaded copy but int8's, whose dynamically quantized linear layers run eager (their
        packed-weight ops are not what Inductor's CPU fusions target, and eager already calls
        fbgemm once per layer)."""
        served = [b for b in backends if b in self._backends]
        copies = [m for p, m in self.models.items() if p != "int8"] if served else []
        return served, copies


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
