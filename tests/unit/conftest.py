"""Fixtures shared by the unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop for code that takes one (the batch runner's futures), closed after."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one CPU thread for the test, the count before restored after (memory peaks and
    timings that depend on the thread count stay comparable)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
