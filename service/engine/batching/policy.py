"""What runs next: the batching decision as a pure function of the queue, the clock and the limits.

No threads, no asyncio, no torch: the worker calls :func:`next_batch` with its pending requests
and does what the :class:`Decision` says. The rules (after TEI's ``core/src/queue.rs`` and
LitServe's ``collate_requests``):

1. Requests whose client left are dropped; requests past their deadline expire (a 504).
2. The oldest live request picks the batch key (the model's call: backend, canonical options,
   other call parameters; and the length bucket), so no key starves another.
3. Requests with that key join in arrival order while the batch stays within ``max_batch_size``
   rows, ``max_batch_tokens`` padded tokens (rows x longest row), ``max_batch_memory`` bytes
   of estimated peak activation memory (the model's estimate for that backend, rows and length,
   passed in as ``memory``) and ``max_request_seconds`` of estimated compute (``seconds``: a
   batch never holds the worker longer than one request may); the first one that does not fit
   ends the batch (strict FIFO within a key). The oldest request always runs, even alone over a limit: the worker runs it in
   parts of :func:`part_rows` (a request whose single row is over the memory budget never gets
   here: it is refused on arrival). The model never splits a batch itself.
4. The batch runs now if it is full (no room for one more row, by count, padded tokens, memory
   or compute), the queue is being flushed (shutdown), or its oldest request found the worker
   idle and the queue empty (no wait when idle: a lone client pays no batching delay). Otherwise
   (it arrived while a batch ran) it runs once it has waited ``max_wait_s`` *and* the worker
   has been free for ``max_wait_s``: right after a batch, the clients it just answered send
   their next requests within a few milliseconds, and this short pause lets them join instead
   of alternating with the rest in half-full batches. Until then the worker sleeps (at most to
   the earliest deadline).
5. No forward pass holds the worker much past ``slice_seconds`` of estimated compute (the
   time slice): a batch grows no further, and a larger request runs in parts of about that
   much. Its parts are the worker's turns, one forward pass each; between two of them the
   requests that arrived meanwhile get one batch (:func:`between_parts`), so a small request
   waits for about one part, not for the whole of a large one (head-of-line blocking).
6. Priority (vLLM's ``priority`` field: lower is served first, default 0) reorders rules 2 and
   3: the head is the live request of the lowest priority (arrival breaks ties), and requests
   of its key join by priority, then arrival. Fairness bound (aging): a request that has waited
   half its time to its deadline outranks every priority (oldest first), so a stream of
   lower values delays a request but never expires it (:func:`served_order`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class BatchKey:
    """Requests with equal keys may share a forward pass.

    Attributes:
        call: what the forward pass shares (the model's
            :class:`~service.engine.servables.base.Call`: backend, canonical options and any
            other call parameter, e.g. ``normalize``).
        bucket: length bucket of the request's longest row (see :func:`length_bucket`).
    """

    call: Any
    bucket: int = 0

    @property
    def backend(self) -> str:
        """The attention backend of the call."""
        return str(self.call.backend)

    @property
    def precision(self) -> str:
        """The precision of the call (which loaded copy of the weights runs)."""
        return str(self.call.precision)


@dataclass(frozen=True)
class Limits:
    """Batching limits (from the settings).

    Attributes:
        max_batch_memory: bytes of estimated peak activation memory one batch may need (None:
            no memory cap).
        max_request_seconds: estimated compute seconds one request, and one batch, may need
            (None: no bound).
        slice_seconds: estimated compute seconds one forward pass may take before waiting
            requests get a turn: batches stop growing there, and a request over it runs in
            parts of about this much, other batches between them (None: no slice).
    """

    max_batch_size: int
    max_batch_tokens: int
    max_wait_s: float
    max_batch_memory: int | None = None
    max_request_seconds: float | None = None
    slice_seconds: float | None = None


# Estimated peak bytes of one forward pass of (key, rows, longest row).
MemoryEstimate = Callable[[BatchKey, int, int], int]
# Estimated seconds of one forward pass of (key, rows, longest row); None: not measured.
SecondsEstimate = Callable[[BatchKey, int, int], float | None]


class Pending(Protocol):
    """What the policy needs to know about a waiting request."""

    @property
    def key(self) -> BatchKey: ...
    @property
    def n_rows(self) -> int: ...
    @property
    def longest(self) -> int: ...
    @property
    def enqueued_at(self) -> float: ...
    @property
    def deadline(self) -> float: ...
    @property
    def cancelled(self) -> bool: ...
    @property
    def arrived_idle(self) -> bool: ...
    @property
    def priority(self) -> int: ...


@dataclass(frozen=True)
class Decision:
    """Indices into the pending sequence, in arrival order.

    Attributes:
        batch: requests to run now as one batch (empty: nothing to run yet).
        expired: requests past their deadline: answer 504 and remove.
        dropped: requests whose client left: remove silently.
        wake_at: when to decide again if nothing new arrives (None: only on arrival).
        resume: run the next part of the request running in parts (see :func:`between_parts`).
    """

    batch: tuple[int, ...] = ()
    expired: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    wake_at: float | None = None
    resume: bool = False


def length_bucket(length: int, smallest: int = 16) -> int:
    """The power of two >= ``length`` (at least ``smallest``): rows of similar length batch
    together, so padding a short text to a long neighbour stays under 2x."""
    bucket = smallest
    while bucket < length:
        bucket *= 2
    return bucket


def padded_tokens(n_rows: int, longest: int) -> int:
    """Size of a padded batch: rows x longest row."""
    return n_rows * longest


def rows_within(budget: float, rows: int, cost: Callable[[int], float]) -> int:
    """The most rows, at least 1 and at most ``rows``, whose ``cost`` (non-decreasing in the
    rows) stays within ``budget``: the size of the parts an over-budget request runs in."""
    low, high = 1, rows
    while low < high:
        mid = (low + high + 1) // 2
        if cost(mid) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def part_rows(
    rows: int,
    longest: int,
    limits: Limits,
    memory: Callable[[int], int] | None = None,
    seconds: Callable[[int], float | None] | None = None,
) -> int:
    """Rows per forward pass for a batch of ``rows`` rows of up to ``longest``: all of them, or
    (for a lone request over a limit) the most that keep each part within ``max_batch_size``
    rows, ``max_batch_tokens`` padded tokens, with ``memory`` (estimated bytes of ``n`` rows)
    the memory budget and with ``seconds`` (estimated seconds of ``n`` rows; None: not
    measured) the time slice. Always at least 1."""
    part = min(rows, limits.max_batch_size, max(1, limits.max_batch_tokens // max(1, longest)))
    budget = limits.max_batch_memory
    if memory is not None and budget is not None and memory(part) > budget:
        part = rows_within(budget, part, memory)
    slice_s = limits.slice_seconds
    if seconds is not None and slice_s is not None and (seconds(part) or 0.0) > slice_s:
        part = rows_within(slice_s, part, lambda n: seconds(n) or 0.0)
    return max(1, part)


def _gone(pending: Sequence[Pending], now: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(dropped, expired): requests whose client left, and those past their deadline."""
    dropped = tuple(i for i, p in enumerate(pending) if p.cancelled)
    expired = tuple(i for i, p in enumerate(pending) if not p.cancelled and p.deadline <= now)
    return dropped, expired


def served_order(pending: Sequence[Pending], live: list[int], now: float) -> list[int]:
    """``live`` (indices in arrival order) in the order they are served: overdue requests
    (waited at least half their time to their deadline) first, oldest first; then the rest by
    priority, lower first, arrival breaking ties. All of one priority: arrival order."""
    if len({pending[i].priority for i in live}) <= 1:
        return live

    def rank(i: int) -> tuple[int, int, int]:
        p = pending[i]
        overdue = now - p.enqueued_at >= (p.deadline - p.enqueued_at) / 2
        return (0, 0, i) if overdue else (1, p.priority, i)

    return sorted(live, key=rank)


def next_batch(
    pending: Sequence[Pending],
    now: float,
    limits: Limits,
    flush: bool = False,
    free_since: float | None = None,
    memory: MemoryEstimate | None = None,
    seconds: SecondsEstimate | None = None,
) -> Decision:
    """Decide what to run next; see the module docstring for the rules.

    Args:
        pending: waiting requests in arrival order.
        now: the current time (same clock as the requests' times).
        limits: batch limits.
        flush: run whatever is there now (shutdown).
        free_since: when the worker finished its last batch (None: never ran one).
        memory: the model's peak-memory estimate, for ``limits.max_batch_memory`` (None: no
            memory cap).
        seconds: the model's compute estimate, for ``limits.max_request_seconds`` (None: no
            time cap).
    """
    dropped, expired = _gone(pending, now)
    gone = set(dropped) | set(expired)
    live = [i for i in range(len(pending)) if i not in gone]
    if not live:
        return Decision(expired=expired, dropped=dropped)
    live = served_order(pending, live, now)

    head = pending[live[0]]
    budget = limits.max_batch_memory if memory is not None else None
    bounds = (limits.max_request_seconds, limits.slice_seconds)
    time_budget = min((b for b in bounds if b is not None), default=None)
    if seconds is None:
        time_budget = None

    def over_budget(rows: int, longest: int) -> bool:  # memory or compute
        if budget is not None and memory is not None and memory(head.key, rows, longest) > budget:
            return True
        if time_budget is None or seconds is None:
            return False
        needed = seconds(head.key, rows, longest)
        return needed is not None and needed > time_budget

    def no_room(rows: int, longest: int) -> bool:  # not even one more row of this length fits
        # Any row joining pads to at least ``longest``, so ``rows + 1`` rows of ``longest`` is
        # the least the next row can add: over the token cap, waiting cannot grow the batch.
        return (
            rows >= limits.max_batch_size
            or padded_tokens(rows + 1, longest) > limits.max_batch_tokens
            or over_budget(rows + 1, longest)
        )

    batch = [live[0]]
    rows, longest = head.n_rows, head.longest
    full = no_room(rows, longest)
    for i in live[1:]:
        if full:
            break
        p = pending[i]
        if p.key != head.key:
            continue
        new_rows, new_longest = rows + p.n_rows, max(longest, p.longest)
        if (
            new_rows > limits.max_batch_size
            or padded_tokens(new_rows, new_longest) > limits.max_batch_tokens
            or over_budget(new_rows, new_longest)
        ):
            full = True  # the next request of this key waits for the next batch
            break
        batch.append(i)
        rows, longest = new_rows, new_longest
        full = no_room(rows, longest)

    start_at = head.enqueued_at + limits.max_wait_s
    if free_since is not None:
        start_at = max(start_at, free_since + limits.max_wait_s)
    if full or flush or head.arrived_idle or now >= start_at:
        return Decision(batch=tuple(sorted(batch)), expired=expired, dropped=dropped)
    wake_at = min(start_at, min(pending[i].deadline for i in live))
    return Decision(expired=expired, dropped=dropped, wake_at=wake_at)


def between_parts(
    pending: Sequence[Pending],
    now: float,
    limits: Limits,
    parts_turn: bool,
    memory: MemoryEstimate | None = None,
    seconds: SecondsEstimate | None = None,
) -> Decision:
    """What runs next while a request runs in parts: its next part, or one batch of the others.

    Turns alternate, so neither side starves: after one of its parts (``parts_turn`` False),
    the waiting requests that fit in one forward pass get one batch, chosen by
    :func:`next_batch` over them and run at once (the pause after a batch waits for clients it
    answered; a part answered nobody); then (``parts_turn`` True), or when none waits, the
    next part (``resume``). A waiting request that itself needs parts waits until the running
    one is done: about one batch of its own kind. Expired and departed requests are reported
    as in :func:`next_batch`.

    Args:
        pending: waiting requests in arrival order (not the one running in parts).
        parts_turn: the last turn went to the others (or to nobody): the next part runs.
        memory, seconds: the model's estimates, as for :func:`next_batch`.
    """
    dropped, expired = _gone(pending, now)
    resume = Decision(expired=expired, dropped=dropped, resume=True)
    if parts_turn:
        return resume
    gone = set(dropped) | set(expired)

    def one_part(p: Pending) -> bool:
        key, longest = p.key, p.longest
        rows_memory = None if memory is None else lambda n: memory(key, n, longest)
        rows_seconds = None if seconds is None else lambda n: seconds(key, n, longest)
        return part_rows(p.n_rows, longest, limits, rows_memory, rows_seconds) >= p.n_rows

    fits = [i for i, p in enumerate(pending) if i not in gone and one_part(p)]
    if not fits:
        return resume
    others = [pending[i] for i in fits]
    chosen = next_batch(others, now, limits, flush=True, memory=memory, seconds=seconds)
    return Decision(batch=tuple(fits[j] for j in chosen.batch), expired=expired, dropped=dropped)
