"""``quality.json``: a model's measured quality per attention backend, one shape for every
precision (:mod:`models.precision`).

.. code-block:: text

    {
      "reference": ..., "corpus": ..., "linear_baseline": ...,   what was measured, and on what
      "precisions": {
        "float32":  {"backends": {name: figures}, "variants": [figures of a backend at options]},
        "bfloat16": {"backends": {...}},
        "int8":     {...}
      },
      "slice": ...                                 a forecaster's windows the tests re-run
    }

Every precision's section has the same keys (``backends``: each backend at its default options;
a forecaster's ``variants``: backends at other options, ``attnserve evaluate --variants``), and
every figure in it is measured against float32's exact attention, so a bfloat16 ``flash`` has a
(small) loss of its own and only float32's exact backends lose nothing by definition. The
arithmetic over the figures is :mod:`models.quality_loss`.

Files written before this shape (float32's ``backends`` and ``variants`` at the top level, the
other precisions under ``precisions``; files older still have no ``precisions``) stay in users'
folders: :func:`read_quality` upgrades them, and every function here takes either shape. ``GET
/models`` shows the figures in that earlier shape, as it always has (:func:`card_quality`).

Written by ``attnserve evaluate``: :mod:`models.text.quality.embedding` (encoders),
:mod:`models.text.quality.classifier` (rerankers, classifiers),
:mod:`models.training.evaluate.informer` and :mod:`models.training.evaluate.hf` (forecasters).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from models.names import DEFAULT_PRECISION

# The keys of one precision's section.
SECTION_KEYS = ("backends", "variants")


def upgrade(quality: Mapping[str, Any]) -> dict[str, Any]:
    """``quality`` in the shape of this module (a copy); one in the earlier shape has float32's
    section made from its top-level ``backends`` and ``variants``, in their place."""
    if not any(key in quality for key in SECTION_KEYS):
        return dict(quality)
    float32 = {key: quality[key] for key in SECTION_KEYS if key in quality}
    others = {p: s for p, s in (quality.get("precisions") or {}).items() if p != DEFAULT_PRECISION}
    out: dict[str, Any] = {}
    for key, value in quality.items():
        if key in SECTION_KEYS or key == "precisions":
            out.setdefault("precisions", {DEFAULT_PRECISION: float32, **others})
        else:
            out[key] = value
    return out


def read_quality(path: Path) -> dict[str, Any]:
    """The figures in ``path`` in the shape of this module (:func:`upgrade`); {} when absent."""
    if not path.is_file():
        return {}
    return upgrade(json.loads(path.read_text(encoding="utf-8")))


def save_quality(path: Path, quality: Mapping[str, Any]) -> None:
    """Write ``quality`` (the shape of this module) to ``path``, indented, as every
    ``attnserve evaluate`` writes it."""
    path.write_text(json.dumps(quality, indent=2) + "\n", encoding="utf-8")


def precision_figures(quality: Mapping[str, Any], precision: str) -> Mapping[str, Any] | None:
    """The section of figures measured in ``precision`` (``backends``, ``variants``); None when
    that precision was not measured."""
    section = (quality.get("precisions") or {}).get(precision)
    if section is None and precision == DEFAULT_PRECISION:
        # The earlier shape: float32's figures at the top level.
        section = {key: quality[key] for key in SECTION_KEYS if key in quality} or None
    return section if isinstance(section, Mapping) else None


def backends_of(
    quality: Mapping[str, Any], precision: str = DEFAULT_PRECISION
) -> Mapping[str, Any]:
    """The figures of each backend at its default options in ``precision`` ({} when none)."""
    return (precision_figures(quality, precision) or {}).get("backends") or {}


def measured_precisions(quality: Mapping[str, Any]) -> list[str]:
    """The precisions with figures (float32 first)."""
    sections = upgrade(quality).get("precisions") or {}
    return [p for p, section in sections.items() if section.get("backends")]


def card_quality(quality: Mapping[str, Any]) -> dict[str, Any]:
    """What a model card (``GET /models``) shows under ``quality``: the figures with float32's
    ``backends`` and ``variants`` at the top level and the other precisions (when there are any)
    under ``precisions``, the shape cards have shown since before precisions existed; a
    forecaster's ``slice`` (what its tests re-run) left out."""
    out: dict[str, Any] = {}
    for key, value in upgrade(quality).items():
        if key == "precisions":
            out.update(value.get(DEFAULT_PRECISION) or {})
            others = {p: s for p, s in value.items() if p != DEFAULT_PRECISION}
            if others:
                out["precisions"] = others
        elif key != "slice":
            out[key] = value
    return out


def backend_rows(quality: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(label, figures)`` per backend of every precision, float32's first: ``flash``, then
    ``flash@bfloat16``: the rows of the tables ``attnserve evaluate`` prints."""
    rows = []
    for precision, section in (upgrade(quality).get("precisions") or {}).items():
        suffix = "" if precision == DEFAULT_PRECISION else f"@{precision}"
        rows += [(f"{name}{suffix}", row) for name, row in (section.get("backends") or {}).items()]
    return rows


def carried_precisions(
    before: Mapping[str, Any], measured: Sequence[str], reference_remeasured: bool
) -> tuple[dict[str, Any], list[str]]:
    """Which of ``before``'s figures in precisions other than float32 a new evaluation keeps,
    and the names it drops. Every precision's figures are read against float32's exact
    reference, so a run that measures that reference again (the weights may have changed since)
    keeps none of the old ones: the precisions it measures itself (``measured``) are written
    fresh and the others are dropped. A run that leaves the reference alone keeps them all."""
    old = {
        p: section
        for p, section in (before.get("precisions") or {}).items()
        if p != DEFAULT_PRECISION
    }
    if not reference_remeasured:
        return old, []
    return {}, [p for p in old if p not in measured]


def merge_backends(before: Mapping[str, Any], measured: Mapping[str, Any]) -> dict[str, Any]:
    """``before`` with the backends of ``measured`` (an evaluation of a few backends alone)
    added, or replacing theirs, in each precision ``measured`` holds; every other figure is
    kept. ValueError when the two were not measured on the same corpus against the same
    reference, or ``before`` has no figures in one of ``measured``'s precisions."""
    before, measured = upgrade(before), upgrade(measured)
    for key in ("reference", "corpus"):
        old, new = before.get(key), measured.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            new = {k: new.get(k) for k in old}  # a file older than a field records less
        if old != new:
            raise ValueError(
                f"quality.json: the {key} differs from the one the file was measured with "
                f"({before.get(key)!r} vs {measured.get(key)!r}); measure every backend again"
            )
    out = json.loads(json.dumps(before))  # a deep copy
    for precision, section in (measured.get("precisions") or {}).items():
        target = (out.get("precisions") or {}).get(precision)
        if target is None:
            raise ValueError(f"quality.json has no {precision} figures to add backends to")
        target.setdefault("backends", {}).update(section.get("backends") or {})
    return out


def dropped_precisions_note(dropped: Sequence[str]) -> str:
    """What ``attnserve evaluate`` prints when :func:`carried_precisions` drops figures."""
    return (
        f"quality.json: dropped the {', '.join(dropped)} figures (measured against the float32 "
        f"reference this run measured again); measure them with --precisions {' '.join(dropped)}"
    )
