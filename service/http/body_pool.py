"""Large request bodies parsed and validated in a helper process, off the event loop.

JSON parsing and pydantic validation run in C/Rust that holds the GIL from start to end: a few MB
of forecast history keep the event loop (and every other request, ``/healthz`` included) waiting
for tens of milliseconds per body, and a thread does not help. A process does: the helper parses
the bytes, validates them against the route's body model and sends back a *packed* form (long
number lists as float64 arrays) that costs the event loop a copy and a cheap re-validation
(``service.http.schemas.arrays`` passes arrays through). Bodies under ``body_parse_min_bytes``
stay on the loop: for them the round trip (a few ms: the body crosses a pipe twice) costs more
latency than the loop would lose parsing them.

The helper is a spawned interpreter (never forked: the server runs torch threads) that imports
pydantic, numpy and the schemas, not torch or the models.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from service.http.json_body import parse_json_body

log = logging.getLogger("attnserve")


@dataclass(frozen=True)
class Parsed:
    """The helper's answer: the body to validate on the loop, or why it was refused."""

    body: Any = None
    json_error: tuple[str, int] | None = None  # (message, character offset)
    errors: list[dict[str, Any]] | None = None  # pydantic's errors, locations under the body


def parse_and_validate(body: bytes, content_encoding: str | None, model: type[BaseModel]) -> Parsed:
    """In the helper process: the body parsed as :func:`parse_json_body` does, validated by
    ``model`` and packed by its ``packed()``."""
    try:
        data = parse_json_body(body, content_encoding)
    except json.JSONDecodeError as exc:
        return Parsed(json_error=(exc.msg, exc.pos))
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        # No inputs in the errors: they can be the whole body, and the 422 names locations only.
        errors = exc.errors(include_url=False, include_input=False)
        return Parsed(errors=[{**e, "loc": ("body", *e["loc"])} for e in errors])
    return Parsed(body=validated.packed())  # type: ignore[attr-defined]


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """In each helper, at start: exit once the server that started it is gone. A helper holds
    both ends of its work queue's pipe, so it would otherwise wait forever after its server was
    killed (SIGKILL, OOM killer), an orphan per kill."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _ready() -> bool:
    """Run once per helper at start-up, so the imports are paid before the first body."""
    return True


class BodyParsePool:
    """A small pool of helper processes for bodies of at least ``min_bytes``.

    ``processes`` 0 turns it off (every body is parsed on the event loop)."""

    def __init__(self, processes: int, min_bytes: int) -> None:
        self.processes = processes
        self.min_bytes = min_bytes
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None

    @property
    def enabled(self) -> bool:
        return self.processes > 0

    def wants(self, body: bytes) -> bool:
        """Whether this body is large enough to leave the event loop."""
        return self.enabled and len(body) >= self.min_bytes

    def _pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ProcessPoolExecutor(
                self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_exit_with_parent,
                initargs=(os.getpid(),),
            )
        return self._executor

    def start(self) -> None:
        """Start every helper and wait until each has imported what it needs (blocking: call
        from a thread). Helpers that cannot start turn the pool off with a warning: bodies are
        then parsed on the event loop, slower under load but correct."""
        if not self.enabled:
            return
        pool = self._pool()
        try:
            for future in [pool.submit(_ready) for _ in range(self.processes)]:
                future.result()
        except (concurrent.futures.process.BrokenProcessPool, OSError) as exc:
            # e.g. a script that starts the server without an ``if __name__ == "__main__":``
            # guard: a spawned helper re-runs it and dies.
            log.warning(
                "body-parsing processes could not start (%s); large bodies are parsed on the "
                "event loop",
                exc,
            )
            self.close(wait=False)
            self.processes = 0

    async def parse(
        self, body: bytes, content_encoding: str | None, model: type[BaseModel]
    ) -> Parsed:
        """Parse and validate ``body`` in a helper; a helper that died is replaced, and the
        body is then parsed on the loop rather than failing the request."""
        try:
            future = self._pool().submit(parse_and_validate, body, content_encoding, model)
            return await asyncio.wrap_future(future)
        except concurrent.futures.process.BrokenProcessPool:
            log.warning("a body-parsing helper process died; starting new ones")
            self.close(wait=False)
            return parse_and_validate(body, content_encoding, model)

    def close(self, wait: bool = True) -> None:
        """Stop the helpers."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)
