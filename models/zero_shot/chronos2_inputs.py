"""Chronos-2's model inputs from our windows, built by the ``chronos-forecasting`` package's own
preprocessing, so categorical encoding and row order are exactly its pipeline's.

Each window goes through ``chronos.chronos2.preprocess.from_list_of_dicts`` alone: its target
rows first, then its covariates (past-only, then known-future ones), numeric as given and
categorical ones target-encoded (one target channel) or ordinal-coded (several), as
``Chronos2Pipeline.predict`` does. Encoding a window alone keeps its rows free of its batch
neighbours' categories (the pipeline encodes a batch of multivariate series together, so an
ordinal code there may depend on the other series).

The rows of every window are then left-padded with NaN to the longest
(``chronos.chronos2.dataset.left_pad_and_cat_2D``, the pipeline's own batching) and each window
is its own group: the model's group attention mixes a window's rows with each other only.

Dimension legend: ``r`` rows of one window (targets + covariates), ``R`` rows of the batch,
``T`` history steps, ``F`` forecast steps the model runs (output patches x patch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.errors import ModelInputError
from models.zero_shot.series import ZeroShotWindow


@dataclass
class ChronosBatch:
    """One forward pass's inputs.

    Attributes:
        context: ``[R, T]`` float32, NaN where missing or padded.
        future: ``[R, F]`` float32 known future covariates, NaN elsewhere.
        group_ids: ``[R]`` the window each row belongs to.
        targets: per window, the ``(start, end)`` rows of its target channels.
    """

    context: torch.Tensor
    future: torch.Tensor
    group_ids: torch.Tensor
    targets: list[tuple[int, int]]


def _is_categorical(column: np.ndarray) -> bool:
    return column.dtype == object


def check_covariates(window: ZeroShotWindow, name: str) -> None:
    """Chronos-2's covariate rules (``ModelInputError`` naming the series and field): a known
    future covariate must also be a past covariate (the model reads its history as a row of the
    group), and of the same kind (numbers in both or categories in both)."""
    for key, future in window.future_covariates.items():
        where = f"{name}: future_covariates[{key!r}]"
        past = window.past_covariates.get(key)
        if past is None:
            raise ModelInputError(
                f"{where} is not among past_covariates: Chronos-2 reads a known future "
                "covariate's history too, so give its past values under the same name"
            )
        if _is_categorical(past) != _is_categorical(future):
            kinds = (
                ("categories", "numbers") if _is_categorical(past) else ("numbers", "categories")
            )
            raise ModelInputError(
                f"{where} holds {kinds[1]} but past_covariates[{key!r}] holds {kinds[0]}; "
                "a covariate must be of one kind in both"
            )


def series_dict(window: ZeroShotWindow) -> dict[str, object]:
    """The window as one of ``Chronos2Pipeline.predict``'s dict inputs (target ``[c, T]``)."""
    return {
        "target": window.target.T,
        "past_covariates": dict(window.past_covariates),
        "future_covariates": dict(window.future_covariates),
    }


def window_rows(window: ZeroShotWindow, steps: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(context [r, T], future [r, steps], targets)``: the package's preprocessing of the window
    alone, the future cut or NaN-padded to ``steps`` as the pipeline's ``_predict_step`` does."""
    from chronos.chronos2.preprocess import from_list_of_dicts

    given = len(next(iter(window.future_covariates.values()))) if window.future_covariates else 0
    (prepared,) = from_list_of_dicts([series_dict(window)], prediction_length=given or steps)
    future = prepared["future_covariates"][:, :steps]
    if future.shape[1] < steps:
        pad = torch.full((future.shape[0], steps - future.shape[1]), float("nan"))
        future = torch.cat([future, pad], dim=1)
    return prepared["context"], future, int(prepared["n_targets"])


def batch_inputs(windows: list[ZeroShotWindow], steps: int, device: torch.device) -> ChronosBatch:
    """Every window's rows in one batch for ``steps`` forecast steps (a multiple of the patch)."""
    from chronos.chronos2.dataset import left_pad_and_cat_2D

    contexts, futures, groups, targets = [], [], [], []
    start = 0
    for group, window in enumerate(windows):
        context, future, n_targets = window_rows(window, steps)
        contexts.append(context)
        futures.append(future)
        groups.append(torch.full((context.shape[0],), group, dtype=torch.long))
        targets.append((start, start + n_targets))
        start += context.shape[0]
    return ChronosBatch(
        left_pad_and_cat_2D(contexts).to(device, torch.float32),
        torch.cat(futures).to(device, torch.float32),
        torch.cat(groups).to(device),
        targets,
    )
