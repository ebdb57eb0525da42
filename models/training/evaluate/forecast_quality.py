"""The figures of a forecaster's ``quality.json`` (:mod:`models.quality_file`), scored by ``attnserve
evaluate`` the same way for our Informer checkpoints (:mod:`.informer`) and transformers
forecaster folders (:mod:`.hf`); each evaluator brings its own forward passes.

- Each backend (and option variant) scored gets one entry: MSE and MAE in scaled units, the ratio
  to the linear baseline on the same windows, which windows, and which backend each attention
  layer ran. Backends and variants scored before and not named again are kept.
- ``--precisions``: the backends (or, when none, the default one) scored again with the network in
  other precisions (:mod:`models.precision`), in entries of the same shape, read against float32's
  exact attention (:mod:`models.quality_loss`). A run that scores that exact reference again drops
  the precisions scored before (the weights may have changed since): the ones it names are scored
  fresh, the others are gone and the command says so. A run that leaves the reference alone (only
  approximations or variants) keeps them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.attention.registry import names
from models.names import DEFAULT_PRECISION, PRECISION_NAMES
from models.quality_file import carried_precisions, dropped_precisions_note, precision_figures
from models.quality_loss import EXACT, variant_label

# score(backend, options) -> the entry of that backend at those options (None: its defaults).
Score = Callable[[str, "dict[str, Any] | None"], dict[str, Any]]


@dataclass(frozen=True)
class Scoring:
    """What the entries of one evaluation share: the model's ``name``, and the windows scored
    (``windows`` of them, every ``stride``-th test window) with the linear baseline's MSE on
    those same windows (``linear_mse``)."""

    name: str
    linear_mse: float
    windows: int
    stride: int

    def entry(
        self,
        backend: str,
        options: Mapping[str, Any] | None,
        tag: str,
        mse: float,
        mae: float,
        layers: Mapping[str, str],
        seconds: float,
    ) -> dict[str, Any]:
        """The entry of ``backend`` at ``options`` (``tag``: ``@bfloat16`` in another
        precision), printed as it is scored; the baseline's MSE is recorded beside it when the
        windows are not all of them, so ratios compare like for like."""
        mse_vs_linear = mse / self.linear_mse - 1
        print(
            f"{self.name} {variant_label(backend, options) + tag:10s} MSE {mse:.4f} MAE "
            f"{mae:.4f} ({mse_vs_linear:+.1%} vs linear, {self.windows} windows, {seconds:.0f}s)",
            flush=True,
        )
        entry = {
            "mse": round(mse, 6),
            "mae": round(mae, 6),
            "vs_linear": round(mse_vs_linear, 4),
            "windows": self.windows,
            "stride": self.stride,
            "layers": dict(layers),
        }
        if self.stride > 1:
            entry["linear_mse"] = round(self.linear_mse, 6)
        return entry


def score_float32(
    before: Mapping[str, Any],
    backends: list[str],
    variants: list[tuple[str, dict[str, Any]]],
    score: Score,
) -> dict[str, Any]:
    """float32's section: ``before``'s entries with ``backends`` at their defaults and the
    ``(backend, options)`` of ``variants`` scored (again) by ``score``."""
    float32 = precision_figures(before, DEFAULT_PRECISION) or {}
    results = dict(float32.get("backends") or {})
    for backend in backends:
        results[backend] = score(backend, None)
    scored = [v for v in float32.get("variants") or [] if "backend" in v]
    for backend, options in variants:
        scored = [v for v in scored if (v["backend"], v["options"]) != (backend, options)]
        scored.append({"backend": backend, "options": options, **score(backend, options)})
    return {"backends": results, "variants": scored}


def score_all_precisions(
    quality: Mapping[str, Any],
    default_backend: str,
    backends: list[str],
    variants: list[tuple[str, dict[str, Any]]],
    precisions: tuple[str, ...],
    score: Callable[..., dict[str, Any]],
    network_in: Callable[[str], Any],
) -> dict[str, Any]:
    """``quality.json``'s ``precisions``: float32's section (:func:`score_float32`), then the
    other precisions' (:func:`score_precisions`), each backend there scored on
    ``network_in(precision)`` (:func:`in_precision`)."""
    float32 = score_float32(quality, backends, variants, score)
    score_in = in_precision(score, network_in)
    by_precision = score_precisions(quality, default_backend, backends, precisions, score_in)
    return {DEFAULT_PRECISION: float32, **by_precision}


def in_precision(
    score: Callable[[str, None, Any, str], dict[str, Any]], network_in: Callable[[str], Any]
) -> Callable[[str, str], dict[str, Any]]:
    """:func:`score_precisions`' ``score_in``: ``score(backend, None, network, "@precision")``, a
    backend at its default options on ``network_in(precision)`` (the network converted to that
    precision), its entry tagged with the precision."""
    return lambda precision, backend: score(backend, None, network_in(precision), f"@{precision}")


def score_precisions(
    quality: Mapping[str, Any],
    default_backend: str,
    backends: list[str],
    precisions: tuple[str, ...],
    score_in: Callable[[str, str], dict[str, Any]],
) -> dict[str, Any]:
    """``quality``'s sections of precisions other than float32, with ``backends`` (or, when none,
    ``default_backend``) re-scored in each of ``precisions`` by ``score_in(precision, backend)``
    (float32 is skipped: :func:`score_float32`). When ``backends`` holds an exact backend
    (float32's reference is measured again) the old figures are dropped first (see the module
    doc)."""
    remeasured = any(b in EXACT for b in backends)
    by_precision, dropped = carried_precisions(quality, precisions, remeasured)
    if dropped:
        print(dropped_precisions_note(dropped), flush=True)
    for precision in precisions:
        if precision == DEFAULT_PRECISION:
            continue
        section = dict(by_precision.get(precision) or {})
        entries = dict(section.get("backends") or {})
        for backend in backends or [default_backend]:
            entries[backend] = score_in(precision, backend)
        by_precision[precision] = {**section, "backends": entries}
    return by_precision


def forecaster_parser(
    description: str | None, folder: str, precisions: str
) -> argparse.ArgumentParser:
    """``attnserve evaluate``'s parser with what a transformers or zero-shot forecaster folder
    both take: the folder (``folder`` helps it), ``--backends``, ``--stride``, ``--threads`` and
    ``--precisions`` (``precisions`` helps it); the evaluator adds its own arguments."""
    p = argparse.ArgumentParser(
        prog="attnserve evaluate",
        description=description,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("folder", type=Path, help=folder)
    p.add_argument("--backends", nargs="+", default=None, choices=list(names()))
    p.add_argument("--stride", type=int, default=1, help="score every k-th test window")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--precisions",
        nargs="+",
        default=[],
        choices=[n for n in PRECISION_NAMES if n != DEFAULT_PRECISION],
        help=precisions,
    )
    return p
