"""Which connections a server process holds, what each is doing, and which to drop when there
are too many: the decision behind :mod:`service.http.transport`'s connection limits, as a plain
class with no sockets or event loop in it (so it is tested on its own).

Issue 50 item 2: uvicorn's ``limit_concurrency`` answers every request a plain-text 503 once the
process holds that many connections, whatever they are doing, so a thousand sockets that each
send a body a byte at a time (or headers, or nothing) took ``/healthz`` and every new client
down. Here a connection is in one of four states:

* ``IDLE``: no byte of its next request yet (just connected, or kept alive between requests).
  Closing it costs a well-behaved client nothing: HTTP clients retry a request on a kept-alive
  connection the server closed before answering (RFC 9112 section 9.3.1).
* ``HEADERS``: part of a request line and headers in.
* ``BODY``: headers in, the body still arriving.
* ``ACTIVE``: a whole request in, the app at work or its response being written. Never dropped:
  a connection limit must not throw away work the server has taken on.
* ``LINGER``: answered and closing, still reading and discarding the rest of a request body so
  the client reads the answer rather than a reset (:mod:`service.http.linger`). A courtesy, not
  work: dropped before any other connection.

The first three are *waiting* on the client, since the connection was made or its last response
was sent (sending a few bytes of headers or body does not restart the clock: a trickle stays
old). Two limits: ``max_per_client`` connections from one client address (a new one first drops
that client's own longest-waiting connection, else it is refused), and ``max_total`` per process
(a new one drops anyone's longest-waiting connection; only when every connection is ``ACTIVE``
is the new one refused). Longest-waiting first, not idle-before-stalled: a connection that just
arrived (a health probe whose request the event loop has not read yet) is idle too, and must
outlive every stalled one that came before it.
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass


class State(enum.IntEnum):
    """What a connection is doing."""

    IDLE = 0
    HEADERS = 1
    BODY = 2
    ACTIVE = 3
    LINGER = 4


@dataclass
class _Entry:
    client: str
    state: State
    since: float  # when it last started waiting on the client (monotonic seconds)


@dataclass(frozen=True)
class Admission:
    """The registry's answer to a new connection: ``admitted`` (False: refuse it, with
    ``reason``) and the connections to drop to make room (already forgotten by the registry)."""

    admitted: bool
    shed: tuple[Hashable, ...] = ()
    reason: str = ""


class ConnectionRegistry:
    """The connections of one server process (every protocol instance of one server shares it)
    and the limits on them; see the module docstring. ``clock`` is injectable for tests."""

    def __init__(
        self,
        max_total: int,
        max_per_client: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.clock = clock
        self._entries: dict[Hashable, _Entry] = {}
        # The connections waiting on their client, longest-waiting first: choosing whom to drop
        # costs O(1).
        self._waiting: OrderedDict[Hashable, None] = OrderedDict()
        self._lingering: OrderedDict[Hashable, None] = OrderedDict()  # dropped before those
        self._by_client: dict[str, set[Hashable]] = {}
        self.shed_total = 0
        self.refused_total = 0
        self.warned_at = float("-inf")  # when the transport last logged about these limits

    def __len__(self) -> int:
        return len(self._entries)

    def count(self, state: State | None = None, client: str | None = None) -> int:
        """Connections held, in ``state`` and/or from ``client`` when given."""
        held = self._entries if client is None else self._by_client.get(client, set())
        return sum(1 for c in held if state is None or self._entries[c].state is state)

    def state(self, conn: Hashable) -> State | None:
        """``conn``'s state, or None once it is forgotten (closed or dropped)."""
        entry = self._entries.get(conn)
        return entry.state if entry else None

    def admit(self, conn: Hashable, client: str) -> Admission:
        """Room for a new connection from ``client``: which to drop first, or a refusal. An
        admitted ``conn`` is held as ``IDLE``."""
        shed: list[Hashable] = []
        if len(self._by_client.get(client, ())) >= self.max_per_client:
            victim = self._oldest_of_client(client)
            if victim is None:
                self.refused_total += 1
                return Admission(False, reason=f"over {self.max_per_client} from this address")
            shed.append(victim)
            self.forget(victim)
        if len(self._entries) >= self.max_total:
            victim = self._oldest()
            if victim is None:
                self.refused_total += 1
                return Admission(False, tuple(shed), f"all {self.max_total} are busy")
            shed.append(victim)
            self.forget(victim)
        self.shed_total += len(shed)
        self._entries[conn] = _Entry(client, State.IDLE, self.clock())
        self._waiting[conn] = None
        self._by_client.setdefault(client, set()).add(conn)
        return Admission(True, tuple(shed))

    def move(self, conn: Hashable, state: State) -> None:
        """``conn`` is now in ``state`` (no change if it already was, or is forgotten)."""
        entry = self._entries.get(conn)
        if entry is None or entry.state is state:
            return
        if state is State.LINGER:  # the connection's last state
            self._waiting.pop(conn, None)
            self._lingering[conn] = None
        elif state is State.ACTIVE:
            del self._waiting[conn]
        elif entry.state is State.ACTIVE:  # waiting on its client again, from now
            entry.since = self.clock()
            self._waiting[conn] = None
        entry.state = state

    def forget(self, conn: Hashable) -> None:
        """``conn`` is closed or dropped (idempotent)."""
        entry = self._entries.pop(conn, None)
        if entry is None:
            return
        self._waiting.pop(conn, None)
        self._lingering.pop(conn, None)
        held = self._by_client[entry.client]
        held.discard(conn)
        if not held:
            del self._by_client[entry.client]

    def _oldest(self) -> Hashable | None:
        return next(iter(self._lingering or self._waiting), None)

    def _oldest_of_client(self, client: str) -> Hashable | None:
        # At most max_per_client connections to look through.
        candidates = [
            (e.state is not State.LINGER, e.since, i, c)
            for i, c in enumerate(self._by_client.get(client, ()))
            if (e := self._entries[c]).state is not State.ACTIVE
        ]
        return min(candidates)[3] if candidates else None
