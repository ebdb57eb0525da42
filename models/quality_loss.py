"""Each attention backend's (and option variant's) measured quality loss against exact attention,
read from a model's shipped quality figures: what ``attention: "auto"`` budgets against (:mod:`service.engine.auto_attention`).

Pure arithmetic over the figures (no torch): a backend without a figure has no loss here, so it
is never chosen on a guess.

Precisions (:mod:`models.precision`): ``quality.json`` holds each precision's figures in the same
shape (:mod:`models.quality_file`, which also reads the files written before it), all measured
against float32's exact reference. So a bfloat16 ``flash`` has a (small) loss of its own, and
only float32's exact backends lose nothing by definition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from models.names import DEFAULT_PRECISION
from models.quality_file import backends_of, precision_figures

EXACT = ("flash", "full")
# The budget a request gets when it names none, per task: a forecast may be up to 5 % worse in
# test MSE than exact attention; an embedding must keep a mean cosine of 0.99 to the exact one.
# A reranking may lose up to 0.05 of Kendall's tau to the exact one; a classifier's top label
# may differ from the exact one's on 1 % of inputs. A multi-vector (ColBERT) model's loss is a
# ranking's too (1 - Kendall's tau of its MaxSim scores), so it gets the reranker's budget.
# A sparse (SPLADE) model's loss is also a ranking's (1 - Kendall's tau of its dot-product
# scores, :mod:`models.text.quality.sparse`): the same budget.
DEFAULT_MAX_QUALITY_LOSS = {
    "forecast": 0.05,
    "encode": 0.01,
    "rerank": 0.05,
    "classify": 0.01,
    "sparse": 0.05,
    "multi_vector": 0.05,
}


def variant_label(backend: str, options: Mapping[str, Any] | None = None) -> str:
    """``performer`` at the defaults, ``performer(num_features=16)`` with options changed: how
    tables, benchmarks and the ``x-attention-choice`` header name a variant."""
    if not options:
        return backend
    return f"{backend}({','.join(f'{k}={v}' for k, v in sorted(options.items()))})"


def _relative(entry: Mapping[str, Any], overall: Any) -> float | None:
    """An entry's MSE over the linear baseline's on the windows it was scored on."""
    linear = entry.get("linear_mse", overall)
    mse = entry.get("mse")
    return None if not linear or mse is None else float(mse) / float(linear)


def _exact_reference(quality: Mapping[str, Any]) -> float | None:
    backends = backends_of(quality)
    overall = (quality.get("linear_baseline") or {}).get("mse")
    return next((_relative(backends[n], overall) for n in EXACT if n in backends), None)


def forecast_losses(
    quality: Mapping[str, Any], precision: str = DEFAULT_PRECISION
) -> dict[str, float]:
    """Relative test-MSE increase of each backend at its default options over exact attention,
    from a checkpoint's ``quality.json`` (:mod:`models.training.evaluate.informer`); ``{}`` without an
    exact figure.

    Backends may have been scored on different windows (the default backend on all of them,
    the others on every k-th, each beside the linear baseline's MSE on its own windows), so each
    MSE is first divided by that linear MSE: ``loss = (mse_b / lin_b) / (mse_exact / lin_exact) - 1``.
    On the same windows this is ``mse_b / mse_exact - 1``. In another ``precision`` every backend,
    exact ones included, is measured against float32's exact reference.
    """
    reference = _exact_reference(quality)
    figures = precision_figures(quality, precision)
    if not reference or figures is None:
        return {}
    overall = (quality.get("linear_baseline") or {}).get("mse")
    exact = EXACT if precision == DEFAULT_PRECISION else ()
    losses = {}
    for name, entry in (figures.get("backends") or {}).items():
        ratio = _relative(entry, overall)
        if ratio is not None:
            losses[name] = 0.0 if name in exact else ratio / reference - 1.0
    return losses


def forecast_variant_losses(
    quality: Mapping[str, Any], precision: str = DEFAULT_PRECISION
) -> list[tuple[str, dict[str, Any], float]]:
    """``(backend, options, loss)`` for each backend scored at options other than its defaults
    (``quality.json`` → ``variants``, written by ``attnserve evaluate --variants``), the loss
    worked out as in :func:`forecast_losses`; ``[]`` without an exact figure."""
    reference = _exact_reference(quality)
    figures = precision_figures(quality, precision)
    if not reference or figures is None:
        return []
    overall = (quality.get("linear_baseline") or {}).get("mse")
    out = []
    for entry in figures.get("variants") or []:
        ratio = _relative(entry, overall)
        if ratio is not None:
            out.append((str(entry["backend"]), dict(entry["options"]), ratio / reference - 1.0))
    return out


def _banded_losses(
    quality: Mapping[str, Any],
    length: int,
    precision: str,
    loss_of: Callable[[Mapping[str, Any]], float | None],
) -> dict[str, tuple[float, dict[str, Any]]]:
    """Per backend, ``loss_of`` the figures of the token band holding ``length``, with the
    options they were measured at; the float32 reference backend loses nothing."""
    losses: dict[str, tuple[float, dict[str, Any]]] = {}
    figures = precision_figures(quality, precision)
    if figures is None:
        return losses
    # The reference backend is exact by definition in float32 only.
    reference = quality.get("reference") if precision == DEFAULT_PRECISION else None
    for name, entry in (figures.get("backends") or {}).items():
        for band, measured in (entry.get("by_tokens") or {}).items():
            low, _, high = str(band).partition("-")
            loss = loss_of(measured) if int(low) <= length <= int(high) else None
            if loss is not None:
                losses[name] = (max(0.0, loss), dict(entry.get("options") or {}))
    if reference and losses:
        losses[str(reference)] = (0.0, {})
    return losses


def embedding_losses(
    quality: Mapping[str, Any], length: int, precision: str = DEFAULT_PRECISION
) -> dict[str, tuple[float, dict[str, Any]]]:
    """``1 - mean cosine`` to the exact float32 embedding per backend in ``precision``, over the
    measured texts whose token count falls in the same band as ``length``
    (``models/text/quality/quality.json``), with the options the figure was measured at. ``{}`` when no
    band covers ``length`` or the precision was not measured."""
    return _banded_losses(
        quality, length, precision, lambda measured: 1.0 - float(measured["mean_cosine"])
    )


def classifier_losses(
    quality: Mapping[str, Any], length: int, precision: str = DEFAULT_PRECISION
) -> dict[str, tuple[float, dict[str, Any]]]:
    """Each backend's measured ``loss`` in ``precision`` for inputs in the token band holding
    ``length`` (a reranker's or classifier's ``quality.json``, written by
    :mod:`models.text.quality.classifier`: 1 - Kendall's tau to the exact ranking, or the share
    of top labels that differ; a multi-vector model's, by :mod:`models.text.quality.multi_vector`:
    1 - Kendall's tau of its MaxSim scores; a sparse model's, by
    :mod:`models.text.quality.sparse`: of its dot-product scores), with the options it was
    measured at; ``{}`` when no band covers ``length`` or the precision was not measured."""

    def loss_of(measured: Mapping[str, Any]) -> float | None:
        return None if measured.get("loss") is None else float(measured["loss"])

    return _banded_losses(quality, length, precision, loss_of)
