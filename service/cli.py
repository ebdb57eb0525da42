"""``attnserve serve`` (and ``python -m service``): run the server; every setting is a flag.

Precedence: flags > ``ATTNSERVE_*`` env vars > defaults. ``attnserve settings`` prints the
settings table (name, env var, default, description). ``attnserve train`` and ``attnserve
evaluate`` fit and score forecasters on any CSV (their own ``--help`` lists their flags).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from service.engine.batching.cpus import openmp_env
from service.settings import Settings


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP server")
    for name, field in Settings.model_fields.items():
        env = f"ATTNSERVE_{name.upper()}"
        switch = field.annotation is bool  # ``--ray`` alone means true; ``--ray false`` works
        repeated = name in REPEATED_FLAGS
        serve.add_argument(
            _flag(name),
            *REPEATED_FLAGS.get(name, ()),
            dest=name,
            default=None,
            metavar="VALUE",
            nargs="?" if switch else None,
            const="true" if switch else None,
            action="append" if repeated else "store",
            help=f"{field.description} [{env}]",
        )
        if switch:  # ``--no-ray``: the --flag/--no-flag pair's spelling of ``--ray false``
            serve.add_argument(
                "--no-" + _flag(name)[2:], dest=name, action="store_const", const="false"
            )
    commands.add_parser("settings", help="print the settings table (markdown)")
    for name, text in MODEL_TOOLS.items():  # flags parsed by the tool itself
        commands.add_parser(name, help=text, add_help=False)
    return parser


# Settings whose flag may be repeated (the values joined by commas), with the peers' spelling
# of the flag beside ours: vLLM's and TEI's ``--served-model-name``.
REPEATED_FLAGS = {"served_model_names": ("--served-model-name",)}

# Training and evaluation live in ``models/training/``: their argument parsers are their own.
MODEL_TOOLS = {
    "train": "train a forecaster on a CSV and write a checkpoint folder (see train --help)",
    "evaluate": "score checkpoints (ours, transformers time-series or zero-shot folders) per "
    "backend "
    "beside the linear baseline, or a text model, cross-encoder, classifier or multi-vector "
    "folder per backend "
    "against exact attention "
    "(see evaluate --help)",
}


# ``attnserve evaluate --help`` without a folder: each kind of folder has its own tool and flags.
EVALUATE_KINDS = """\
attnserve evaluate measures what the folder it is given holds; each kind has its own flags:
  (no folder) or attnserve Informer checkpoints   forecast MSE/MAE per backend beside the
                                                  linear baseline (the help below)
  a transformers time-series folder (PatchTST,    attnserve evaluate FOLDER --help
    Informer, TimeSeriesTransformer)
  a zero-shot forecaster folder (TimesFM 2.5,    attnserve evaluate FOLDER --data CSV
    Chronos-2): MSE, MASE, WQL per backend        (see FOLDER --help)
  a sentence-transformers or transformers text    attnserve evaluate FOLDER --help
    encoder folder
  a cross-encoder (reranker) or sequence-         attnserve evaluate FOLDER --help
    classifier folder
  a multi-vector (ColBERT) folder                 attnserve evaluate FOLDER --help
  a SPLADE sparse-encoder folder                  attnserve evaluate FOLDER --help
"""


def run_model_tool(name: str, argv: list[str]) -> int:
    """Run ``attnserve train|evaluate`` with its own arguments: ``evaluate`` runs the command of
    the folder's kind (:data:`service.engine.folder_kinds.FOLDER_KINDS`: the ranking or label
    quality of a cross-encoder, the MaxSim or sparse ranking of a multi-vector or SPLADE folder,
    the text quality of an encoder, MSE/MASE/WQL of a forecaster), else the Informer
    checkpoints' evaluation."""
    if name == "evaluate":
        from pathlib import Path

        from service.engine.folder_kinds import CHECKPOINT_EVALUATE, kind_of

        folders = [a for a in argv if not a.startswith("-") and Path(a).is_dir()]
        if not folders and ("-h" in argv or "--help" in argv):
            print(EVALUATE_KINDS)
        kind = kind_of(Path(folders[0])) if folders else None
        importlib.import_module(kind.evaluate if kind else CHECKPOINT_EVALUATE).main(argv)
        return 0
    importlib.import_module("models.training.informer_train").main(argv)
    return 0


def settings_table() -> str:
    """Markdown table of every setting."""
    rows = ["| setting | env var | default | description |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default: Any = field.default
        if isinstance(default, tuple):
            default = ",".join(map(str, default))
        rows.append(
            f"| `{_flag(name)}` | `ATTNSERVE_{name.upper()}` | `{default}` | {field.description} |"
        )
    return "\n".join(rows)


def settings_error(exc: ValidationError) -> str:
    """One line for a refused setting (pydantic's own report is a multi-line block with a URL):
    the setting, its flag and variable, the value given and the rule it broke; several such
    clauses joined by ``; ``."""
    parts = []
    for error in exc.errors(include_url=False):
        rule = " ".join(error["msg"].removeprefix("Value error, ").split())
        name = ".".join(str(p) for p in error["loc"])
        if not name:  # a rule across several settings: its message names them
            parts.append(rule)
            continue
        value = error.get("input")
        shown = f" = {value!r}" if not isinstance(value, dict) else ""
        parts.append(f"{name} ({_flag(name)} / ATTNSERVE_{name.upper()}){shown}: {rule}")
    return "invalid settings: " + "; ".join(parts)


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the ``serve`` flags give (those left out: None, not given); a repeated
    flag's values joined by commas, as its environment variable takes them."""
    overrides = {k: v for k, v in vars(args).items() if k != "command" and v is not None}
    return {k: ",".join(v) if isinstance(v, list) else v for k, v in overrides.items()}


def export_openmp_env(settings: Settings) -> None:
    """Put the ``omp_wait_policy`` setting in the environment while torch is not yet imported:
    its OpenMP runtime reads the variable once, when it loads, in this process (one server) or
    in the worker processes and a local Ray cluster, which inherit the environment."""
    explicit = "omp_wait_policy" in settings.model_fields_set
    os.environ.update(openmp_env(settings.omp_wait_policy, os.environ, explicit))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MODEL_TOOLS:
        return run_model_tool(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "settings":
        print(settings_table())
        return 0
    try:
        settings = Settings(**settings_overrides(args))
    except ValidationError as exc:
        print(f"attnserve: {settings_error(exc)}", file=sys.stderr)
        return 2
    export_openmp_env(settings)
    # Torch-free, like the supervisor: ``workers`` auto (0) becomes a number of processes here.
    from service.observability.logs import configure_logging
    from service.runtime.auto_workers import auto_workers

    configure_logging(settings)
    choice = auto_workers(settings)
    settings = settings.model_copy(update={"workers": choice.workers})
    if settings.ray:
        if importlib.util.find_spec("ray") is None:
            print("attnserve: --ray needs Ray Serve: pip install 'attnserve[ray]'", file=sys.stderr)
            return 2
        from service.runtime.ray_serve import run as run_on_ray

        return run_on_ray(settings)
    if settings.workers > 1:
        # The supervisor loads no model: keep torch and the app out of its process.
        from service.runtime.workers import Supervisor

        return Supervisor(settings, choice).run()
    logging.getLogger("attnserve").info("%s", choice)
    from service.runtime.server import serve  # imports uvicorn and the app only when serving

    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
