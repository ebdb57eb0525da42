"""Fixtures shared by the unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop for code that takes one (the batch runner's futures), closed after."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
