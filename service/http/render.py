"""Large JSON answers rendered without holding up the event loop.

``pydantic_core.to_json`` is one C call that holds the GIL until the whole document is written:
for a ``/tokenize`` of a few megabytes of text (about a million token objects) or a full
``/embed_all`` (millions of numbers) that is hundreds of milliseconds in which ``/healthz`` and
every other request wait. Here a list of rows is written in a worker thread, a bounded piece of
each row per call; between calls the thread's Python loop lets the interpreter hand the GIL to
the event loop (``sys.getswitchinterval``), so no single hold grows with the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json

from service.engine.cpu_work import off_loop

# Values per to_json call: a few milliseconds of writing at most.
PIECE_VALUES = 16_384


def _rows_json(rows: Sequence[Sequence[Any]], piece: int, exclude_none: bool) -> bytes:
    """``rows`` (a list of lists) as a JSON array of arrays, ``piece`` items per call."""
    out = [b"["]
    for i, row in enumerate(rows):
        out.append(b",[" if i else b"[")
        for start in range(0, len(row), piece):
            if start:
                out.append(b",")
            out.append(to_json(row[start : start + piece], exclude_none=exclude_none)[1:-1])
        out.append(b"]")
    out.append(b"]")
    return b"".join(out)


async def rows_json(
    rows: Sequence[Sequence[Any]], values_per_item: int = 1, exclude_none: bool = False
) -> bytes:
    """``rows`` as JSON bytes, the same as ``to_json(rows)``. Small answers are written here;
    large ones in a worker thread, about :data:`PIECE_VALUES` values per ``to_json`` call
    (``values_per_item``: how many each item of a row holds, e.g. a token vector's width)."""
    items = sum(len(row) for row in rows)
    piece = max(1, PIECE_VALUES // max(1, values_per_item))
    if items <= piece:
        return to_json(rows, exclude_none=exclude_none)
    return await off_loop(_rows_json, rows, piece, exclude_none)
