"""MkDocs hook: the parts of the docs that the code already knows, generated at build time.

- ``<!-- attnserve:settings -->`` becomes the settings table, the same one ``attnserve settings``
  prints (``service.cli.settings_table``), so the page never drifts from ``Settings``.
- ``<!-- attnserve:openapi -->`` becomes the endpoints and request/response bodies of the app's
  OpenAPI schema, and the schema itself is written into the site as ``api/openapi.json``.
  The app is built with a loader that loads nothing and its lifespan never runs, so no model is
  loaded and nothing is downloaded.
- The benchmark plots in ``benchmarks/results/*.png`` are published as ``performance/plots/``,
  so the performance pages show the files the benchmarks wrote, not copies of them.

A marker that no page used fails the build: a renamed page must not silently lose its table.
"""

from __future__ import annotations

import json
import posixpath
from functools import cache
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
PLOTS = ROOT / "benchmarks" / "results"
SETTINGS_MARKER = "<!-- attnserve:settings -->"
OPENAPI_MARKER = "<!-- attnserve:openapi -->"
OPENAPI_FILE = "api/openapi.json"

_seen: set[str] = set()


@cache
def _openapi() -> dict[str, Any]:
    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings(), loader=lambda _settings, _device: [])
    return app.openapi()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    _seen.clear()
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    schema = json.dumps(_openapi(), indent=2, ensure_ascii=False) + "\n"
    files.append(File.generated(config, OPENAPI_FILE, content=schema))
    for plot in sorted(PLOTS.glob("*.png")):
        files.append(File.generated(config, f"performance/plots/{plot.name}", abs_src_path=plot))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if SETTINGS_MARKER in markdown:
        from service.cli import settings_table

        _seen.add(SETTINGS_MARKER)
        markdown = markdown.replace(SETTINGS_MARKER, settings_table())
    if OPENAPI_MARKER in markdown:
        _seen.add(OPENAPI_MARKER)
        link = posixpath.relpath(OPENAPI_FILE, posixpath.dirname(page.file.src_uri) or ".")
        markdown = markdown.replace(OPENAPI_MARKER, render_openapi(_openapi(), link))
    return markdown


def on_post_build(config: MkDocsConfig) -> None:
    missing = {SETTINGS_MARKER, OPENAPI_MARKER} - _seen
    if missing:
        raise PluginError(f"docs/hooks.py: no page holds {', '.join(sorted(missing))}")


# --- OpenAPI as Markdown -------------------------------------------------------------------------


def _cell(text: str) -> str:
    """One table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(schema: dict[str, Any]) -> str:
    """A short readable type: ``string``, ``list of number``, ``Series``, ``string or null``."""
    if "$ref" in schema:
        return f"[{_ref_name(schema['$ref'])}](#{_ref_name(schema['$ref']).lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(_type(s) for s in schema[key]))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return str(kind)


def _body_schema(content: dict[str, Any]) -> str:
    schema = content.get("application/json", {}).get("schema")
    return _type(schema) if schema else "—"


def _endpoints(spec: dict[str, Any]) -> list[str]:
    lines = [
        "| method | path | what | request body | 200 body | statuses |",
        "|---|---|---|---|---|---|",
    ]
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            body = _body_schema(op.get("requestBody", {}).get("content", {}))
            ok = _body_schema(op.get("responses", {}).get("200", {}).get("content", {}))
            what = op.get("description") or op.get("summary", "")
            statuses = ", ".join(op.get("responses", {}))
            lines.append(
                f"| {method.upper()} | `{path}` | {_cell(what)} | {body} | {ok} | {statuses} |"
            )
    return lines


def _schema_table(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    properties = schema.get("properties", {})
    if not properties:
        return [*lines, f"Type: {_type(schema)}.", ""]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
    for field, prop in properties.items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        lines.append(
            f"| `{field}` | {_type(prop)} | {'yes' if field in required else ''} | {default} "
            f"| {_cell(prop.get('description', ''))} |"
        )
    if schema.get("additionalProperties") is False:
        lines += ["", "Unknown fields are refused (422)."]
    return [*lines, ""]


def render_openapi(spec: dict[str, Any], link: str) -> str:
    """The endpoints table, then one table per schema (request and response bodies); ``link``
    points at the whole schema, relative to the page."""
    schemas = spec.get("components", {}).get("schemas", {})
    lines = [
        f"Generated from the app's OpenAPI {spec.get('openapi', '')} schema "
        f"(the whole schema: [openapi.json]({link})).",
        "",
        "### Endpoints",
        "",
        *_endpoints(spec),
        "",
    ]
    for name in sorted(schemas):
        lines += _schema_table(name, schemas[name])
    return "\n".join(lines)
