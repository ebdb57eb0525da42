"""``attnserve serve`` (and ``python -m service``): run the server; every setting is a flag.

Precedence: flags > ``ATTNSERVE_*`` env vars > defaults. ``attnserve settings`` prints the
settings table (name, env var, default, description).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from service.settings import Settings


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP server")
    for name, field in Settings.model_fields.items():
        env = f"ATTNSERVE_{name.upper()}"
        serve.add_argument(
            _flag(name),
            dest=name,
            default=None,
            metavar="VALUE",
            help=f"{field.description} [{env}]",
        )
    commands.add_parser("settings", help="print the settings table (markdown)")
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "settings":
        print(settings_table())
        return 0
    overrides = {k: v for k, v in vars(args).items() if k != "command" and v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        print(f"attnserve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    if settings.workers > 1:
        # The supervisor loads no model: keep torch and the app out of its process.
        from service.logs import configure_logging
        from service.workers import Supervisor

        configure_logging(settings)
        return Supervisor(settings).run()
    from service.server import serve  # imports uvicorn and the app only when serving

    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
