"""Read a sentence-transformers ``SparseEncoder`` folder (6.x; 5.x wrote the same files).

Two forms are understood:

- SPLADE: ``modules.json`` lists the masked-language model (``MLMTransformer``, or a
  ``Transformer`` whose ``sentence_bert_config.json`` says ``transformer_task: fill-mask``) and
  ``SpladePooling`` (``pooling_strategy`` max or sum, ``activation_function`` relu or
  log1p_relu).
- Inference-free SPLADE: ``modules.json`` lists one ``Router`` whose ``router_config.json``
  gives each route (``query``, ``document``, ...) its modules: the SPLADE pair above, or one
  ``SparseStaticEmbedding`` (a weight per vocabulary entry in its ``model.safetensors``).

``config_sentence_transformers.json`` gives the prompts and ``max_active_dims`` (the default
pruning). Any other module (``SparseAutoEncoder``, ``Dense``...) is refused by name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.text.folders.embedding import (
    TextFolder,
    module_dir,
    read_json,
    read_optional_json,
    read_prompts,
    read_weights_folder,
    transformer_text_folder,
)
from models.text.network.config import BertConfig
from models.text.network.pooling import Pooling
from models.text.splade import ACTIVATIONS, STRATEGIES

MLM = "mlm"  # a route through the network, its MLM head and SPLADE pooling
STATIC = "static"  # a route through SparseStaticEmbedding's weights only
_MLM_KINDS = ("MLMTransformer", "Transformer")
_KINDS = (*_MLM_KINDS, "SpladePooling", "SparseStaticEmbedding", "Router")
# sentence-transformers' SparseEncoder.encode passes this modality with every text.
_MODALITY = "text"


@dataclass(frozen=True)
class SparseFolder:
    """What a ``SparseEncoder`` folder says.

    Attributes:
        encoder: the masked-language model's folder (as an embedding folder reads it).
        config_json: its ``config.json`` (the MLM head's settings).
        strategy: SPLADE pooling over tokens, ``max`` or ``sum``.
        activation: ``relu`` or ``log1p_relu``.
        routes: each route's kind, :data:`MLM` or :data:`STATIC` (one unnamed route: no Router).
        default_route: the route of a text sent with no task (the Router's ``default_route``).
        route_mappings: the Router's ``(task, modality) -> route`` table.
        static: the ``SparseStaticEmbedding`` module's folder, if a route uses it.
        max_active_dims: entries kept per vector by default (None: all non-zero ones).
    """

    encoder: TextFolder
    config_json: dict[str, Any]
    strategy: str
    activation: str
    routes: dict[str, str]
    default_route: str | None = None
    route_mappings: dict[tuple[str | None, str | None], str] = field(default_factory=dict)
    static: Path | None = None
    max_active_dims: int | None = None

    @property
    def router(self) -> bool:
        """The folder routes texts by task (an inference-free model)."""
        return len(self.routes) > 1 or "" not in self.routes

    def route(self, task: str | None) -> str:
        """The route a text of ``task`` (``query``, ``document``, None) takes, as the Router
        resolves it with modality ``text``: the mappings (exact, task, modality, neither), a
        route named after the task, else the default route.

        Raises:
            ValueError: a task no route serves (the message lists the routes).
        """
        if not self.router:
            return ""
        for key in ((task, _MODALITY), (task, None), (None, _MODALITY), (None, None)):
            if key in self.route_mappings:
                return self.route_mappings[key]
        if task is not None and task in self.routes:
            return task
        if _MODALITY in self.routes:
            return _MODALITY
        if task is None and self.default_route is not None:
            return self.default_route
        raise ValueError(f"no route for task {task!r}; routes: {', '.join(self.routes)}")


def _kind(type_name: Any, where: str) -> str:
    kind = str(type_name).rsplit(".", 1)[-1]
    if kind not in _KINDS:
        raise ValueError(
            f"{where} module is a {type_name!r}, which attnserve does not run in a sparse "
            f"encoder (supported: {', '.join(_KINDS)})"
        )
    return kind


def is_sparse_folder(path: Path) -> bool:
    """True when ``path`` holds a sentence-transformers ``SparseEncoder`` (its
    ``config_sentence_transformers.json`` says so, or its modules are sparse ones)."""
    try:
        if (
            read_optional_json(path / "config_sentence_transformers.json").get("model_type")
            == "SparseEncoder"
        ):
            return True
        modules = read_json(path / "modules.json")
        types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        if any(t.endswith("Router") for t in types):  # a Router names its modules' types
            router = read_optional_json(path / "router_config.json").get("types") or {}
            types += [str(t) for t in router.values()] if isinstance(router, dict) else []
    except (ValueError, TypeError):  # unreadable: not judged here (the loader says why)
        return False
    return any(".sparse_encoder." in t for t in types)


def _splade_settings(folder: Path) -> tuple[str, str]:
    raw = read_json(folder / "config.json")
    if not isinstance(raw, dict):
        raise ValueError(f"{folder.name}/config.json must hold a JSON object")
    strategy = raw.get("pooling_strategy", "max")
    activation = raw.get("activation_function", "relu")
    if strategy not in STRATEGIES:
        raise ValueError(f"SpladePooling pooling_strategy {strategy!r} is not max or sum")
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"SpladePooling activation_function {activation!r} is not one of {ACTIVATIONS}"
        )
    return strategy, activation


def _mlm_transformer(folder: Path, kind: str) -> None:
    """Refuse a ``Transformer`` module that is no masked-language model."""
    task = read_optional_json(folder / "sentence_bert_config.json").get("transformer_task")
    if kind == "Transformer" and task != "fill-mask":
        raise ValueError(
            f"the Transformer module's transformer_task is {task!r}; a SPLADE model's is "
            "'fill-mask' (its MLM head makes the vocabulary logits)"
        )


def _route_mappings(raw: Any) -> dict[tuple[str | None, str | None], str]:
    """The Router's mappings, saved with ``str((task, modality))`` keys."""
    out: dict[tuple[str | None, str | None], str] = {}
    for key, route in (raw or {}).items():
        try:
            task, modality = ast.literal_eval(key)
        except (ValueError, SyntaxError, TypeError):
            raise ValueError(
                f"router_config.json route_mappings key {key!r} is unreadable"
            ) from None
        out[(task, modality if not isinstance(modality, list | tuple) else None)] = str(route)
    return out


def _read_router(path: Path) -> tuple[dict[str, list[tuple[str, Path]]], dict[str, Any]]:
    """Each route's modules (kind, folder) and the Router's parameters."""
    config = read_json(path / "router_config.json")
    if not isinstance(config, dict) or not isinstance(config.get("structure"), dict):
        raise ValueError("router_config.json must hold the Router's types and structure")
    types = config.get("types") or {}
    routes = {}
    for route, ids in config["structure"].items():
        modules = []
        for module_id in ids:
            kind = _kind(types.get(module_id), f"router route {route!r}: the {module_id!r}")
            modules.append((kind, module_dir(path, {"path": module_id})))
        routes[str(route)] = modules
    return routes, dict(config.get("parameters") or {})


def read_sparse_folder(path: Path) -> SparseFolder:
    """Read ``path`` (either form).

    Raises:
        ValueError: a missing file, an unsupported module or arrangement, settings out of
            range; the message says which (the caller names the folder).
    """
    modules = read_json(path / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise ValueError("modules.json must list the model's modules")
    listed = [(_kind(m.get("type"), f"modules.json {m.get('path')!r}"), m) for m in modules]
    parameters: dict[str, Any] = {}
    if [kind for kind, _ in listed] == ["Router"]:
        routes, parameters = _read_router(path)
    else:
        routes = {"": [(kind, module_dir(path, m)) for kind, m in listed]}
    kinds: dict[str, str] = {}
    mlm: list[tuple[Path, Path]] = []  # (transformer, pooling) folders per MLM route
    static: list[Path] = []
    for route, chain in routes.items():
        order = [kind for kind, _ in chain]
        if order == ["SparseStaticEmbedding"]:
            kinds[route] = STATIC
            static.append(chain[0][1])
        elif len(order) == 2 and order[0] in _MLM_KINDS and order[1] == "SpladePooling":
            _mlm_transformer(chain[0][1], order[0])
            kinds[route] = MLM
            mlm.append((chain[0][1], chain[1][1]))
        else:
            raise ValueError(
                f"route {route or 'of modules.json'!r} lists {order}; attnserve runs "
                "MLMTransformer + SpladePooling, or SparseStaticEmbedding"
            )
    if len(set(mlm)) != 1 or len(set(static)) > 1:
        raise ValueError(
            "a sparse encoder needs exactly one MLMTransformer + SpladePooling path (and at "
            f"most one SparseStaticEmbedding); this one has {len(set(mlm))} and {len(set(static))}"
        )
    transformer, pooling = mlm[0]
    weights, config = read_weights_folder(transformer)
    assert isinstance(config, BertConfig)  # our own encoders only: the head reads our states
    st_config = read_optional_json(path / "config_sentence_transformers.json")
    prompts, default_prompt = read_prompts(st_config)
    top = st_config.get("max_active_dims")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"max_active_dims must be a positive integer, got {top!r}")
    encoder = transformer_text_folder(
        path,
        weights,
        config,
        Pooling(("cls",)),  # unused: SPLADE pools the logits
        read_optional_json(transformer / "sentence_bert_config.json"),
        prompts=prompts,
        default_prompt_name=default_prompt,
    )
    default_route = parameters.get("default_route")
    if default_route is None and parameters.get("allow_empty_key", True) and routes:
        default_route = next(iter(routes))  # the Router's own fallback: its first route
    return SparseFolder(
        encoder,
        dict(read_json(weights / "config.json")),
        *_splade_settings(pooling),
        routes=kinds,
        default_route=default_route,
        route_mappings=_route_mappings(parameters.get("route_mappings")),
        static=static[0] if static else None,
        max_active_dims=top,
    )
