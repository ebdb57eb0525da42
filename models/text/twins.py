"""A text model's twin: the same model rebuilt by its own constructor over another network.

Every text model keeps each constructor argument as an attribute of the same name (the rule
scikit-learn's ``get_params`` / ``clone`` rely on, ``sklearn/base.py``), so one step can call the
constructor again with them, swapping in the converted network and its precision. A model whose
constructor takes an argument it does not keep under that name fails loudly here, not silently.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

M = TypeVar("M")


def twin_of(model: M, network: Any, precision: str) -> M:
    """A new ``type(model)`` built by its constructor over ``network`` in ``precision``, every
    other constructor argument read from ``model``'s attribute of the same name.

    Raises:
        AttributeError: the constructor takes an argument ``model`` keeps under no such name.
    """
    cls = type(model)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # after self
    first, rest = params[0], params[1:]  # the network comes first
    kwargs = {p.name: getattr(model, p.name) for p in rest if p.name != "precision"}
    return cls(**{first.name: network}, **kwargs, precision=precision)  # type: ignore[call-arg]
