"""Memory a large request used goes back to the operating system, whatever became of it.

Parsing a few MB of JSON and tokenising a long text allocate hundreds of MB on the request's
thread, freed when the request ends: answered, refused (a 413, a 422 over the compute budget) or
abandoned. glibc keeps freed memory for reuse, and the periodic trim
(:mod:`service.engine.batching.allocator`) used to run only after a batch, so a flood of
refused requests (which never reach a batch) left gigabytes resident for good. After every
request whose body is at least ``min_bytes`` (or of unknown size), this asks the device runtime
to trim once its interval allows (:meth:`~service.engine.batching.device.DeviceRuntime.trim_later`:
a timer, so no later request is needed).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from service.state import AppState

# A body under this size allocates a few MB at most on its way through: not worth a trim.
MIN_TRIM_BODY_BYTES = 64 * 1024


class TrimAfterLargeBodies:
    """ASGI middleware: after a request with a large (or chunked) body, schedule a trim."""

    def __init__(self, app: ASGIApp, state: AppState, min_bytes: int = MIN_TRIM_BODY_BYTES) -> None:
        self.app = app
        self.state = state
        self.min_bytes = min_bytes

    def _large(self, scope: Scope) -> bool:
        if scope.get("method") in ("GET", "HEAD"):
            return False
        length = dict(scope.get("headers", ())).get(b"content-length")
        return length is None or not length.isdigit() or int(length) >= self.min_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._large(scope):
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            if self.state.runtime is not None:
                self.state.runtime.trim_later()
