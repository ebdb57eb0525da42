"""Served model names: other names clients may call loaded models by, the way vLLM's and
text-embeddings-inference's ``--served-model-name`` do, so a client written for
``text-embedding-3-small`` reaches a loaded model by configuration, not by editing its code.

The ``served_model_names`` setting is comma-separated entries, each ``alias=model`` (``model``:
a loaded model's name, or one of its own aliases) or a bare ``alias`` when exactly one model is
loaded (TEI's and vLLM's flag names the one model they serve). The aliases join each model's
own (``ServedModel.aliases``), so every lookup by name (the registry, TEI's routes, ``/models``)
takes them. Checked once the models are loaded, when every model's name is known.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.engine.registry import ModelLoadError
from service.engine.servables.base import ServedModel


def served_entries(text: str) -> list[tuple[str, str | None]]:
    """``(alias, model)`` per comma-separated entry of ``text`` (``model`` None for a bare
    alias), in order.

    Raises:
        ModelLoadError: an entry that is not ``alias=model`` or ``alias``, or an alias given twice.
    """
    entries: list[tuple[str, str | None]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        alias, equals, model = (part.strip() for part in entry.partition("="))
        if not alias or (equals and not model):
            raise ModelLoadError(
                f"served_model_names entry {entry!r} is not alias=model (or a bare alias when "
                "one model is loaded), e.g. text-embedding-3-small=all-MiniLM-L6-v2"
            )
        if any(alias == seen for seen, _ in entries):
            raise ModelLoadError(f"served_model_names gives the alias {alias!r} twice")
        entries.append((alias, model or None))
    return entries


def served_names(text: str, servables: Sequence[ServedModel]) -> dict[str, str]:
    """Each alias of ``text`` (the ``served_model_names`` setting) -> the name of the loaded
    model it names.

    Raises:
        ModelLoadError: a malformed entry, an alias that is already a loaded model's name (or
            another model's alias), a model that is not loaded, or a bare alias beside several
            loaded models; the message names the alias and the fix.
    """
    by_name = {name: s.name for s in servables for name in (s.name, *s.aliases)}
    loaded = ", ".join(s.name for s in servables) or "none"
    out: dict[str, str] = {}
    for alias, model in served_entries(text):
        if model is None:
            if len(servables) != 1:
                raise ModelLoadError(
                    f"served_model_names alias {alias!r} names no model and {len(servables)} are "
                    f"loaded ({loaded}); write {alias}=MODEL"
                )
            model = servables[0].name
        if model not in by_name:
            raise ModelLoadError(
                f"served_model_names alias {alias!r} names model {model!r}, which is not "
                f"loaded; loaded: {loaded}"
            )
        # An alias the model already has is no clash (the same servables served again).
        if alias in by_name and (alias == by_name[alias] or by_name[alias] != by_name[model]):
            raise ModelLoadError(
                f"served_model_names alias {alias!r} is already the name of loaded model "
                f"{by_name[alias]!r}; pick another alias (loaded: {loaded})"
            )
        out[alias] = by_name[model]
    return out


def with_served_names(servables: Sequence[ServedModel], text: str) -> list[ServedModel]:
    """``servables``, each with the served names that name it added to its aliases (see
    :func:`served_names`, whose refusals this raises)."""
    names = served_names(text, servables)
    for servable in servables:
        mine = tuple(
            alias
            for alias, model in names.items()
            if model == servable.name and alias not in servable.aliases
        )
        if mine:
            servable.aliases = (*servable.aliases, *mine)
    return list(servables)
