"""Which backends a pair measurement compares, and its per-precision sections of ``quality.json``.

Shared by the reranker/classifier (:mod:`models.text.quality.classifier`), multi-vector
(:mod:`models.text.quality.multi_vector`) and sparse (:mod:`models.text.quality.sparse`)
measurements: each scores the same corpus with an exact reference and every backend the model
accepts, in float32 and in each precision asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from models.attention import AttentionError, registry
from models.names import DEFAULT_PRECISION
from models.text.base import TextModel
from models.text.quality.embedding import reference_for

M = TypeVar("M", bound=TextModel)
R = TypeVar("R")  # what a backend's run gives: logits, vectors
# A backend's figures on a model's copy in one precision (:func:`precision_sections`).
Figures = Callable[[M, str], dict[str, Any]]


def accepted_backends(classifier: TextModel, names: Sequence[str]) -> dict[str, dict]:
    """``{backend: resolved default options}`` for those of ``names`` the model can run."""
    out = {}
    for name in names:
        try:
            out[name] = classifier.check_attention(name, None)
        except AttentionError:
            continue
    return out


def precision_sections(
    model: M, accepted: dict[str, dict], precisions: Sequence[str], figures: Figures[M]
) -> dict[str, Any]:
    """``quality.json``'s ``precisions``: float32's (``model``'s) ``accepted`` backends, then in
    each of ``precisions`` every backend its twin accepts, the reference included, each entry
    its ``options`` and ``figures(copy, backend)``."""

    def section(copy: M, names: dict[str, dict]) -> dict[str, Any]:
        return {
            name: {"options": options, **figures(copy, name)} for name, options in names.items()
        }

    out = {DEFAULT_PRECISION: {"backends": section(model, accepted)}}
    for precision in precisions:
        if precision != model.precision:
            twin = model.with_precision(precision)
            out[precision] = {"backends": section(twin, accepted_backends(twin, list(accepted)))}
    return out


def measure_backends(
    model: M,
    bands: Sequence[tuple[int, int]],
    backends: Sequence[str] | None,
    reference: str | None,
    precisions: Sequence[str],
    run: Callable[[M, str], R],
    summarise: Callable[[R, R], dict[str, Any]],
) -> tuple[str, dict[str, Any]]:
    """The exact reference (``reference``, else :func:`reference_for` the longest band) and
    ``quality.json``'s ``precisions`` (:func:`precision_sections`) of the reference and those
    of ``backends`` (None: every registered one) the model accepts: ``run(copy, backend)`` in
    every precision, ``summarise(got, exact)`` against the float32 reference's own run."""
    reference = reference or reference_for(max(high for _, high in bands))
    listed = registry.names() if backends is None else backends
    accepted = accepted_backends(model, [reference, *[b for b in listed if b != reference]])
    exact = run(model, reference)

    def figures(copy: M, name: str) -> dict[str, Any]:
        # The float32 reference's own run is ``exact``: not run twice.
        got = exact if copy is model and name == reference else run(copy, name)
        return summarise(got, exact)

    return reference, precision_sections(model, accepted, precisions, figures)
