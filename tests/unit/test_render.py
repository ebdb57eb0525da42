"""Large JSON answers written in pieces off the event loop are the same bytes as one
``to_json`` call, whatever the piece size falls on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from pydantic_core import to_json

from service.http import render
from service.http.render import rows_json


@dataclass(frozen=True)
class Item:
    id: int
    start: int | None


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1000])
def test_rows_in_pieces_are_the_same_json(monkeypatch: pytest.MonkeyPatch, piece: int) -> None:
    monkeypatch.setattr(render, "PIECE_VALUES", piece)
    vectors = [[[float(i), -0.5 * j] for j in range(n)] for i, n in enumerate([5, 0, 1, 8])]
    assert asyncio.run(rows_json(vectors, values_per_item=1)) == to_json(vectors)
    items = [[Item(i, None if i % 3 == 0 else i) for i in range(n)] for n in (4, 9, 0)]
    assert asyncio.run(rows_json(items)) == to_json(items)  # None stays null
    assert asyncio.run(rows_json(items, exclude_none=True)) == to_json(items, exclude_none=True)
    assert asyncio.run(rows_json([])) == b"[]"
