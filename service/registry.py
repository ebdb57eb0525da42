"""The models this process serves: loading them by name and finding them per request."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from service.errors import ModelNotFound
from service.servables.base import Servable
from service.settings import Settings

log = logging.getLogger("attnserve")

TEXT_MODEL = "all-MiniLM-L6-v2"
TEXT_ALIASES = ("sentence-transformers/all-MiniLM-L6-v2",)

Loader = Callable[[Settings, str], list[Servable]]


def load_servables(settings: Settings, device: str) -> list[Servable]:
    """Load every model named in ``settings.models`` on ``device`` (weights from safetensors)."""
    # Imported here: building an app (and its tests) must not pay for torch models up front.
    from models.informer import InformerForecaster
    from models.text import SentenceEncoder
    from service.servables.forecast import ForecastServable
    from service.servables.text import TextServable

    servables: list[Servable] = []
    for name in settings.models:
        log.info("loading %s on %s", name, device)
        if name in (TEXT_MODEL, *TEXT_ALIASES):
            encoder = SentenceEncoder.load(max_tokens=settings.max_text_tokens, device=device)
            servables.append(TextServable(encoder, settings.max_batch_tokens, TEXT_ALIASES))
        elif name.startswith("informer-") or Path(name).is_dir():
            servables.append(ForecastServable(InformerForecaster.load(name, device=device)))
        else:
            raise ValueError(
                f"unknown model {name!r} in settings.models: use {TEXT_MODEL}, a shipped Informer "
                "name (informer-...) or a path to an Informer checkpoint folder"
            )
    return servables


class Registry:
    """Loaded models by name (and alias)."""

    def __init__(self, servables: Iterable[Servable]) -> None:
        self.models: dict[str, Servable] = {}
        self._by_name: dict[str, Servable] = {}
        for s in servables:
            if s.name in self.models:
                raise ValueError(f"model {s.name!r} is loaded twice")
            self.models[s.name] = s
            for name in (s.name, *getattr(s, "aliases", ())):
                self._by_name[name] = s

    def names(self, task: str | None = None) -> list[str]:
        return [n for n, s in self.models.items() if task is None or s.task == task]

    def get(self, name: str | None, task: str) -> Servable:
        """The ``task`` model called ``name`` (the only one of that task when None).

        Raises:
            ModelNotFound: no such model of this task is loaded (the message lists those that are).
        """
        loaded = self.names(task)
        if name is None:
            if len(loaded) == 1:
                return self.models[loaded[0]]
            raise ModelNotFound(
                f"name a model: this server has {len(loaded)} {task} models "
                f"({', '.join(loaded) or 'none'})"
            )
        servable = self._by_name.get(name)
        if servable is None or servable.task != task:
            raise ModelNotFound(
                f"no {task} model {name!r} is loaded; {task} models: {', '.join(loaded) or 'none'}"
            )
        return servable
