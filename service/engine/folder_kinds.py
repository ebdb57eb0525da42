"""The kinds of model folder this server takes, in one table: how each is recognised, loaded and
evaluated.

:data:`FOLDER_KINDS` is the one list. Loading (:mod:`service.engine.registry`) and ``attnserve
evaluate`` (:mod:`service.cli`) both take the first kind whose ``detects`` says yes, so a new kind
of folder is one entry here (its reader in ``models/``, its servable in ``servables/``, its quality
command) and reaches both. A folder no kind recognises is an attnserve checkpoint (an Informer).

Order matters where one folder answers to several tests: multi-vector and SPLADE folders hold a
``modules.json`` as every sentence-transformers folder does, so they come before the plain text
encoder. Every import is inside a function: building an app or the CLI must not pay for torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.engine.servables.base import ServedModel

if TYPE_CHECKING:
    from models.informer import InformerForecaster
    from models.text import SentenceEncoder
    from models.text.classifier import TextClassifier

# An Informer checkpoint (no kind recognised the folder) is evaluated by this command.
CHECKPOINT_EVALUATE = "models.training.evaluate.informer"


class ModelLoadError(ValueError):
    """A model the settings ask for cannot be loaded. The message names the model (or folder),
    what is wrong and how to fix it, so start-up reports it in one line, without a traceback."""


@dataclass(frozen=True)
class FolderKind:
    """One kind of model folder.

    Attributes:
        name: what the folder holds, in words (logs, help).
        detects: whether a folder is of this kind (reads its files, loads no weights).
        load: the folder's servable on a device, with a copy per precision.
        evaluate: the module whose ``main(argv)`` runs ``attnserve evaluate`` on such a folder.
    """

    name: str
    detects: Callable[[Path], bool]
    load: Callable[[Path, str, tuple[str, ...]], ServedModel]
    evaluate: str


def load_encoder(folder: Path, device: str) -> SentenceEncoder:
    """``SentenceEncoder.from_folder(folder)``, its failures as one-line :class:`ModelLoadError`."""
    from models.text import SentenceEncoder

    try:
        return SentenceEncoder.from_folder(folder, device=device)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{folder}: {exc}") from exc


def load_classifier(folder: Path, device: str) -> TextClassifier:
    """``TextClassifier.from_folder(folder)`` (``CausalReranker``'s for a causal-LM reranker),
    its failures as one-line :class:`ModelLoadError`."""
    from models.text.causal_reranker import CausalReranker
    from models.text.classifier import TextClassifier
    from models.text.folders.logit_score import is_causal_reranker_folder

    kind = CausalReranker if is_causal_reranker_folder(folder) else TextClassifier
    try:
        return kind.from_folder(folder, device=device)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{folder}: {exc}") from exc


def load_hf_forecaster(folder: Path, device: str) -> Any:
    """A transformers time-series folder (:class:`models.hf_forecast.forecaster.HFForecaster`),
    its failures as one-line :class:`ModelLoadError`."""
    from models.hf_forecast import FolderError

    try:
        from models.hf_forecast.forecaster import HFForecaster
    except ImportError as exc:  # transformers is an extra
        raise ModelLoadError(
            f"{folder}: serving transformers time-series folders needs transformers "
            f"({exc.name} is missing): pip install 'attnserve[transformers]'"
        ) from None
    try:
        return HFForecaster.load(folder, device=device)
    except (FolderError, OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{folder}: {exc}") from exc


def load_checkpoint_forecaster(target: str, device: str) -> InformerForecaster:
    """``InformerForecaster.load(target)`` (a shipped name or an attnserve checkpoint folder),
    its failures as :class:`ModelLoadError`."""
    from models.informer import InformerForecaster
    from models.informer.checkpoint import CheckpointError, load_checkpoint
    from service.engine.servables.zero_shot import refuse_foreign

    refuse_foreign(Path(target))  # a config.json of a model_type that no loader takes
    try:
        return InformerForecaster.load(target, device=device)
    except CheckpointError as exc:
        raise ModelLoadError(str(exc)) from exc
    except FileNotFoundError as exc:
        if Path(target).is_dir():  # a folder without config.json: let the checks say what lacks
            try:
                load_checkpoint(Path(target), device)
            except CheckpointError as checked:
                raise ModelLoadError(str(checked)) from exc
        raise ModelLoadError(str(exc)) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:  # e.g. a damaged quality.json
        raise ModelLoadError(
            f"{target}: cannot load this checkpoint ({type(exc).__name__}: {exc})"
        ) from exc


def _is_multi_vector(folder: Path) -> bool:
    from models.text.folders.multi_vector import is_multi_vector_folder

    return is_multi_vector_folder(folder)


def _is_sparse(folder: Path) -> bool:
    from models.text.folders.sparse import is_sparse_folder

    return is_sparse_folder(folder)


def _is_classifier(folder: Path) -> bool:
    """A cross-encoder or sequence classifier, or a causal-LM reranker (``LogitScore``)."""
    from models.text.folders.classifier import is_classifier_folder
    from models.text.folders.logit_score import is_causal_reranker_folder

    return is_classifier_folder(folder) or is_causal_reranker_folder(folder)


def _is_text(folder: Path) -> bool:
    from models.text.folders.embedding import is_text_folder

    return is_text_folder(folder)


def _is_zero_shot(folder: Path) -> bool:
    from models.zero_shot import zero_shot_kind

    return zero_shot_kind(folder) is not None


def _is_hf_forecast(folder: Path) -> bool:
    from models.hf_forecast import is_forecast_folder

    return is_forecast_folder(folder)


def _multi_vector(folder: Path, device: str, precisions: tuple[str, ...]) -> ServedModel:
    from service.engine.servables.multi_vector import load_multi_vector

    return load_multi_vector(folder, device, precisions)


def _sparse(folder: Path, device: str, precisions: tuple[str, ...]) -> ServedModel:
    from service.engine.servables.sparse import load_sparse

    return load_sparse(folder, device, precisions)


def _classifier(folder: Path, device: str, precisions: tuple[str, ...]) -> ServedModel:
    from service.engine.servables.text import TextServable

    return TextServable(load_classifier(folder, device), (), precisions)


def _text(folder: Path, device: str, precisions: tuple[str, ...]) -> ServedModel:
    from service.engine.servables.text import TextServable

    return TextServable(load_encoder(folder, device), (), precisions)


def _zero_shot(folder: Path, device: str, precisions: tuple[str, ...]) -> ServedModel:
    from service.engine.servables.zero_shot import load_zero_shot_servable

    return load_zero_shot_servable(folder, device, precisions)


def _hf_forecast(folder: Path, device: str, precisions: tuple[str, ...]) -> ServedModel:
    from service.engine.servables.forecast import ForecastServable

    return ForecastServable(load_hf_forecaster(folder, device), precisions)


FOLDER_KINDS: tuple[FolderKind, ...] = (
    FolderKind(
        "multi-vector (ColBERT) encoder",
        _is_multi_vector,
        _multi_vector,
        "models.text.quality.multi_vector",
    ),
    FolderKind("SPLADE sparse encoder", _is_sparse, _sparse, "models.text.quality.sparse"),
    FolderKind(
        "cross-encoder, sequence classifier or causal-LM reranker",
        _is_classifier,
        _classifier,
        "models.text.quality.classifier",
    ),
    FolderKind(
        "sentence-transformers or transformers text encoder",
        _is_text,
        _text,
        "models.text.quality.embedding",
    ),
    FolderKind(
        "zero-shot forecaster (TimesFM 2.5, Chronos-2)",
        _is_zero_shot,
        _zero_shot,
        "models.training.evaluate.zero_shot",
    ),
    FolderKind(
        "transformers time-series forecaster",
        _is_hf_forecast,
        _hf_forecast,
        "models.training.evaluate.hf",
    ),
)


def kind_of(folder: Path) -> FolderKind | None:
    """The first kind in :data:`FOLDER_KINDS` that recognises ``folder``; None for an attnserve
    checkpoint (or a folder that is none of these: loading it as a checkpoint says what lacks)."""
    return next((kind for kind in FOLDER_KINDS if kind.detects(folder)), None)
