"""A request body read as JSON, strictly (shared by the routes and the body-parsing helper
processes, which is why it imports neither FastAPI nor the models)."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic_core import from_json


def parse_json_body(body: bytes, content_encoding: str | None = None) -> Any:
    """The body as JSON, strictly: UTF-8 only (no byte-order mark, no UTF-16/32), no
    ``Content-Encoding``, pydantic-core's nesting limit. Every refusal is a
    ``json.JSONDecodeError`` saying what was wrong, which FastAPI turns into a 422.

    pydantic-core refuses some unpaired surrogate escapes (``"\\ud800"``), which JSON allows: those
    bodies are parsed by the standard library, so the model's text check can name the input that
    holds one (a 422 with its index)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding != "identity":
        raise json.JSONDecodeError(
            f"Content-Encoding {content_encoding!r} is not supported; send the body uncompressed",
            "",
            0,
        )
    if body.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        raise json.JSONDecodeError(
            "the body starts with a byte-order mark (UTF-16 or UTF-8 with BOM); send UTF-8 "
            "without one",
            "",
            0,
        )
    try:
        return from_json(body)
    except ValueError as exc:
        error = exc
    if "surrogate" in str(error) or "hex escape" in str(error):
        try:  # unpaired surrogate escapes are valid JSON: let the text check name the input
            return json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError):
            pass
    raise json.JSONDecodeError(str(error), "", _position(body, str(error))) from None


def _position(body: bytes, message: str) -> int:
    """The character offset of pydantic-core's "at line L column C" (0 when it gives none)."""
    match = re.search(r"line (\d+) column (\d+)", message)
    if match is None:
        return 0
    line, column = int(match[1]), int(match[2])
    lines = body.decode("utf-8", errors="replace").split("\n")
    return sum(len(text) + 1 for text in lines[: line - 1]) + column
