"""The models this process serves: loading them by name and finding them per request."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from models.names import DEFAULT_PRECISION, TEXT_ALIASES, TEXT_MODEL
from service.engine.folder_kinds import (
    ModelLoadError,
    kind_of,
    load_checkpoint_forecaster,
    load_encoder,
    load_hf_forecaster,
)
from service.engine.servables.base import ServedModel
from service.errors import InvalidRequest, ModelNotFound
from service.settings import Settings

log = logging.getLogger("attnserve")


Loader = Callable[[Settings, str], list[ServedModel]]


def model_dir_checkpoints(model_dir: Path) -> dict[str, Path]:
    """The checkpoint folders in ``model_dir`` by model name (the folder's name), in name order:
    every immediate subfolder, followed if it is a link. Entries whose name starts with "." (such
    as ``.ipynb_checkpoints``) and plain files (a README) are skipped. The folders themselves are
    checked when they load.

    Raises:
        ModelLoadError: ``model_dir`` is not a folder, or is itself a checkpoint folder.
    """
    if not model_dir.is_dir():
        problem = "is not a folder" if model_dir.exists() else "does not exist"
        raise ModelLoadError(f"model_dir {str(model_dir)!r} {problem}")
    if (model_dir / "config.json").is_file() or (model_dir / "modules.json").is_file():
        raise ModelLoadError(
            f"model_dir {str(model_dir)!r} is itself a model folder (it holds config.json); "
            "set model_dir to the folder above it, or name this folder in models"
        )
    return {
        entry.name: entry
        for entry in sorted(model_dir.iterdir())
        if not entry.name.startswith(".") and entry.is_dir()
    }


def _check_names(models: tuple[str, ...], folders: dict[str, Path]) -> None:
    """Refuse two models that would answer to one name, before any weights load."""
    taken: dict[str, str] = {}  # name (or alias) -> what claims it
    for entry in models:
        text = entry in (TEXT_MODEL, *TEXT_ALIASES)
        # A checkpoint path is served under its folder's name (InformerForecaster.load).
        for name in (TEXT_MODEL, *TEXT_ALIASES) if text else (Path(entry).name,):
            if name in taken:
                raise ModelLoadError(
                    f"models lists {taken[name]} and {entry!r}, which would both serve as "
                    f"{name!r}; list each model once"
                )
            taken[name] = repr(entry)
    for name, folder in folders.items():
        if name in taken:
            raise ModelLoadError(
                f"{folder}: model name {name!r} is already taken by {taken[name]} in models; "
                "a folder in model_dir is served under its folder's name: rename the folder, "
                "or drop the other model from models"
            )


def _check_precisions(precisions: tuple[str, ...], device: str) -> None:
    """Refuse, before any weights load, a precision this device would serve badly (float16 on
    a CPU, bfloat16 on a CPU without native bfloat16: :func:`models.precision.check_precisions`)."""
    if precisions == (DEFAULT_PRECISION,):
        return  # float32 runs everywhere; no torch import just to say so
    from models.precision import PrecisionError, check_precisions, native_bf16

    try:
        check_precisions(precisions, device)
    except PrecisionError as exc:
        raise ModelLoadError(str(exc)) from None
    if "bfloat16" in precisions and device == "cpu" and native_bf16() is None:
        log.warning(
            "precision bfloat16: cannot tell whether this CPU has native bfloat16 arithmetic "
            "(no /proc/cpuinfo); compare its speed with float32 (benchmarks/text/precision.py)"
        )


def _served(
    source: str | Path, precisions: tuple[str, ...], build: Callable[[], ServedModel]
) -> ServedModel:
    """``build()`` (load a model and make its servable, with a copy per precision), its
    failures as one-line :class:`ModelLoadError` naming ``source``: a precision copy that
    cannot be made (int8 calibration, a model that runs in none of the precisions) stops
    start-up like a broken folder, not with a traceback."""
    try:
        return build()
    except ModelLoadError:
        raise
    except Exception as exc:  # whatever breaks, this model cannot be served: say which
        lines = str(exc).strip().splitlines()
        first = lines[0] if lines else ""
        if isinstance(exc, ValueError):  # the models' refusals: already a sentence
            raise ModelLoadError(f"{source}: {first}") from exc
        raise ModelLoadError(
            f"{source}: cannot be served in {', '.join(precisions)} ({type(exc).__name__}: {first})"
        ) from exc


def _load_named(
    name: str, settings: Settings, device: str, shipped_hf: dict[str, Path]
) -> ServedModel:
    """The servable of one entry of ``settings.models`` (a shipped name or a folder path)."""
    from models.text import SentenceEncoder
    from models.text.folders.packaged import PACKAGED, packaged_folder
    from service.engine.servables.forecast import ForecastServable
    from service.engine.servables.text import TextServable

    precisions = settings.precisions
    if name in (TEXT_MODEL, *TEXT_ALIASES):
        encoder = SentenceEncoder.load(max_tokens=settings.max_text_tokens, device=device)
        return TextServable(encoder, TEXT_ALIASES, precisions)
    if name in PACKAGED:
        try:
            folder = packaged_folder(name)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{name}: {exc}") from exc
        return TextServable(load_encoder(folder, device), (), precisions)
    path = Path(name)
    if path.is_dir() and kind_of(path) is not None:
        return _load_folder(path, settings, device)
    if name in shipped_hf:
        return ForecastServable(load_hf_forecaster(shipped_hf[name], device), precisions)
    if name.startswith("informer-") or Path(name).is_dir():
        return ForecastServable(load_checkpoint_forecaster(name, device), precisions)
    raise ModelLoadError(
        f"unknown model {name!r} in models: use {TEXT_MODEL}, "
        f"{', '.join(PACKAGED)}, a shipped forecaster (informer-..., "
        f"{', '.join(shipped_hf) or 'patchtst-...'}), or a path to "
        "a model folder (sentence-transformers, transformers encoder, transformers "
        "time-series forecaster, or an attnserve checkpoint)"
    )


def _load_folder(folder: Path, settings: Settings, device: str) -> ServedModel:
    """The servable of a model folder, by the first of
    :data:`~service.engine.folder_kinds.FOLDER_KINDS` that recognises it, else an attnserve
    checkpoint."""
    from service.engine.servables.forecast import ForecastServable

    kind = kind_of(folder)
    if kind is None:
        forecaster = load_checkpoint_forecaster(str(folder), device)
        return ForecastServable(forecaster, settings.precisions)
    return kind.load(folder, device, settings.precisions)


def load_servables(settings: Settings, device: str) -> list[ServedModel]:
    """Load every model named in ``settings.models``, then every model folder in
    ``settings.model_dir`` (see :func:`model_dir_checkpoints`), on ``device``. A folder is of the
    first kind in :data:`~service.engine.folder_kinds.FOLDER_KINDS` that recognises it (ColBERT,
    SPLADE, cross-encoder or classifier, text encoder, zero-shot or transformers forecaster), else
    an attnserve checkpoint.

    Names are checked before any weights load; all models load before any serves, so a failure
    leaves nothing half served.

    Raises:
        ModelLoadError: an unknown model name, a missing or broken checkpoint folder, a model
            that cannot be made in the listed precisions, or two models with one name; the
            message names the model or folder and the fix.
    """
    # Imported here: building an app (and its tests) must not pay for torch models up front.
    from models.hf_forecast.folder import shipped_folders

    _check_precisions(settings.precisions, device)
    precisions = settings.precisions
    folders = model_dir_checkpoints(settings.model_dir) if settings.model_dir else {}
    if settings.model_dir and not folders:
        log.warning("model_dir %s holds no checkpoint folders", settings.model_dir)
    _check_names(settings.models, folders)
    shipped_hf = shipped_folders()
    servables: list[ServedModel] = []
    for name in settings.models:
        log.info("loading %s on %s", name, device)
        load = partial(_load_named, name, settings, device, shipped_hf)
        servables.append(_served(name, precisions, load))
    for name, folder in folders.items():
        log.info("loading %s from %s on %s", name, folder, device)
        servables.append(
            _served(folder, precisions, partial(_load_folder, folder, settings, device))
        )
    return servables


def task_serves(model_task: str, task: str) -> bool:
    """Whether a model of ``model_task`` answers ``task``'s routes: its own task, and a reranker
    (a one-label classifier) also answers ``classify`` (``/predict``), as
    text-embeddings-inference does."""
    return model_task == task or (task == "classify" and model_task == "rerank")


def serves(model: ServedModel, task: str) -> bool:
    """Whether ``model`` answers ``task``'s routes (see :func:`task_serves`; a multi-vector
    model also answers ``rerank``: its ``extra_tasks``)."""
    return task_serves(model.task, task) or task in model.extra_tasks


def _refuse_other_output(model: ServedModel, task: str) -> None:
    """A 422 (naming the route that carries it) when a sparse encoder's vectors are asked of a
    dense route, or a dense encoder's of ``/embed_sparse``: neither answer fits the other."""
    if "sparse" not in (model.task, task) or serves(model, task):
        return
    if model.task == "sparse":
        raise InvalidRequest(
            f"model {model.name!r} is a sparse (SPLADE) encoder: its vectors, one weight per "
            "vocabulary token, do not fit this route's answer; POST /embed_sparse returns them"
        )
    raise InvalidRequest(
        f"model {model.name!r} is not a sparse encoder (its task: {model.task}); POST "
        f"/embed_sparse serves sparse (SPLADE) encoders only (GET /models/{model.name}: routes)"
    )


class Registry:
    """Loaded models by name (and alias)."""

    def __init__(self, servables: Iterable[ServedModel]) -> None:
        self.models: dict[str, ServedModel] = {}
        self._by_name: dict[str, ServedModel] = {}
        for s in servables:
            if s.name in self.models:
                raise ValueError(f"model {s.name!r} is loaded twice")
            self.models[s.name] = s
            for name in (s.name, *s.aliases):
                self._by_name[name] = s

    def names(self, task: str | None = None) -> list[str]:
        """Loaded model names (of ``task``: see :func:`serves`)."""
        return [n for n, s in self.models.items() if task is None or serves(s, task)]

    def find(self, name: str) -> ServedModel:
        """The model called ``name`` or aliased so (whatever its task).

        Raises:
            ModelNotFound: no model by that name is loaded (the message lists those that are).
        """
        if name not in self._by_name:
            raise ModelNotFound(
                f"model {name!r} is not loaded; loaded: {', '.join(self.names()) or 'none'}"
            )
        return self._by_name[name]

    def get(self, name: str | None, task: str) -> ServedModel:
        """The ``task`` model called ``name`` (the only one of that task when None).

        Raises:
            ModelNotFound: no such model of this task is loaded (the message lists those that are).
        """
        loaded = self.names(task)
        if name is None:
            if len(loaded) == 1:
                return self.models[loaded[0]]
            if not loaded and len(self.models) == 1:
                _refuse_other_output(next(iter(self.models.values())), task)
            if not loaded:
                raise ModelNotFound(
                    f"no {task} model is loaded (loaded: {', '.join(self.names()) or 'none'}); "
                    f"to serve one, start the server with a {task} model's folder or name in "
                    "--models (ATTNSERVE_MODELS) or its folder under --model-dir"
                )
            raise ModelNotFound(
                f"name a model: this server has {len(loaded)} {task} models "
                f"({', '.join(loaded) or 'none'})"
            )
        servable = self._by_name.get(name)
        if servable is not None:
            _refuse_other_output(servable, task)
        if servable is None or not serves(servable, task):
            raise ModelNotFound(
                f"no {task} model {name!r} is loaded; {task} models: {', '.join(loaded) or 'none'}"
            )
        return servable
