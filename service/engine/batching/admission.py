"""Refusals on arrival: what the worker tells a client whose request cannot fit, before it queues.

A request whose single row is over the batch memory budget (``limits.max_batch_memory``) gets a
:class:`~service.errors.MemoryBudgetExceeded` naming the backends that would fit; one whose
estimated compute on this device is over the per-request limit (``limits.max_request_seconds``)
gets a :class:`~service.errors.ComputeBudgetExceeded` saying how many rows, which options or
which backends would fit. Both are 422s. The estimates are the worker's (cached per key, rows and
length); these functions only decide and word the answer.
"""

from __future__ import annotations

from collections.abc import Callable

from service.engine.batching.device import MIB
from service.engine.batching.policy import BatchKey, rows_within
from service.engine.servables.base import ServedModel
from service.errors import ComputeBudgetExceeded, MemoryBudgetExceeded

# How one row and its length read in a refusal, per task.
ROW_WORDS = {"forecast": ("series", "steps"), "encode": ("text", "tokens")}
# Plurals that are not the word plus "s".
PLURALS = {"series": "series"}


def counted(n: int, row: str) -> str:
    """``n`` and ``row`` in the number it needs ("1 text", "37 series", "2 texts")."""
    return f"{n} {row if n == 1 else PLURALS.get(row, row + 's')}"


MemoryEstimate = Callable[[BatchKey, int, int], int]  # (key, rows, longest) -> bytes
SecondsEstimate = Callable[[BatchKey, int, int], float | None]  # None: backend not measured yet


def memory_refusal(
    servable: ServedModel, key: BatchKey, length: int, budget: int, estimate: MemoryEstimate
) -> MemoryBudgetExceeded | None:
    """The refusal of a request whose one row of ``length`` under ``key`` needs more activation
    memory than ``budget`` bytes, or None when it fits."""
    needed = estimate(key, 1, length)
    if needed <= budget:
        return None
    fits = []
    for backend in servable.backends():
        if backend == key.backend:
            continue
        other = BatchKey(servable.default_call(backend), key.bucket)
        other_needs = estimate(other, 1, length)
        if other_needs <= budget:
            fits.append((other_needs, backend))
    row, unit = ROW_WORDS.get(servable.task, ("row", "tokens"))
    advice = (
        "use a backend whose memory grows about linearly with the length; estimated to fit: "
        + ", ".join(f"{b} (~{e / MIB:.0f} MiB)" for e, b in sorted(fits))
        if fits
        else "no attention backend fits one row; send shorter inputs or raise the budget"
    )
    return MemoryBudgetExceeded(
        f"{servable.name}: one {row} of {length} {unit} under attention '{key.backend}' needs an "
        f"estimated {needed / MIB:.0f} MiB of activation memory, over this server's batch "
        f"memory budget of {budget / MIB:.0f} MiB (max_batch_memory_mb); {advice}"
    )


def compute_refusal(
    servable: ServedModel,
    key: BatchKey,
    rows: int,
    length: int,
    budget: float,
    estimate: SecondsEstimate,
) -> ComputeBudgetExceeded | None:
    """The refusal of a request of ``rows`` rows of up to ``length`` under ``key`` whose
    estimated compute is over ``budget`` seconds, or None when it fits (or is not priced yet)."""
    needed = estimate(key, rows, length)
    if needed is None or needed <= budget:
        return None
    row, unit = ROW_WORDS.get(servable.task, ("row", "tokens"))

    def fits(k: BatchKey, n: int = 1) -> float | None:
        seconds = estimate(k, n, length)
        return seconds if seconds is not None and seconds <= budget else None

    ways = []
    if fits(key) is not None:
        most = rows_within(budget, rows, lambda n: estimate(key, n, length) or 0)
        ways.append(f"send at most {counted(most, row)} of this length per request")
    default = BatchKey(servable.default_call(key.backend), key.bucket)
    if default != key and (seconds := fits(default, rows)) is not None:
        ways.append(f"use {key.backend}'s default options (~{seconds:.1f} s)")
    others = [
        (seconds, backend)
        for backend in servable.backends()
        if backend != key.backend
        and (seconds := fits(BatchKey(servable.default_call(backend), key.bucket), rows))
        is not None
    ]
    if others:
        listed = ", ".join(f"{b} (~{t:.1f} s)" for t, b in sorted(others))
        ways.append(f"use a cheaper attention backend: {listed}")
    options = ", ".join(f"{k}={v}" for k, v in key.call.options) or "default options"
    return ComputeBudgetExceeded(
        f"{servable.name}: {counted(rows, row)} of up to {length} {unit} under "
        f"attention '{key.backend}' ({options}) need an estimated {needed:.1f} s of compute "
        f"on this server, over its per-request limit of {budget:.1f} s "
        "(max_request_compute_s); to fit: "
        + ("; or ".join(ways) if ways else f"send shorter {PLURALS.get(row, row + 's')}")
    )


def window_token_cap(
    key: BatchKey, limit: int, budget: float, estimate: SecondsEstimate
) -> int | None:
    """The most tokens a request's texts may hold, once one of them is over ``limit`` and so
    cut into windows, before its windows are surely over ``budget`` seconds (None: the backend
    is not priced yet, so nothing to judge).

    Why it is a safe bound: a windowed text's first window is exactly ``limit`` tokens, so the
    request's rows are priced at ``limit`` each; a text of ``n`` tokens becomes at least
    ``n / limit`` rows (one row of at most ``limit``, or windows of at most ``limit`` whose
    bodies cover its own tokens), so texts holding more than ``R · limit`` tokens make more than
    ``R`` rows. With ``R`` the most rows of ``limit`` whose estimate fits the budget (the
    estimate grows with the rows), more than this cap is over the budget: a model may stop
    tokenizing there and the request be refused (:func:`windows_refusal`) without the rest."""
    one = estimate(key, 1, limit)
    if one is None:
        return None
    if one > budget:
        return 0
    most = rows_within(budget, 1 << 20, lambda n: estimate(key, n, limit) or 0.0)
    return most * limit


def windows_refusal(
    servable: ServedModel,
    key: BatchKey,
    tokens: int,
    limit: int,
    budget: float,
    estimate: SecondsEstimate,
) -> ComputeBudgetExceeded:
    """The refusal of a request whose texts hold at least ``tokens`` tokens (counting stopped
    there) and which long_text windows would cut into windows of ``limit``: at least
    ``tokens / limit`` rows (:func:`window_token_cap`)."""
    rows = -(-tokens // limit)
    seconds = estimate(key, rows, limit)
    cap = window_token_cap(key, limit, budget, estimate) or 0
    needs = f"an estimated {seconds:.1f} s" if seconds is not None else "more"
    return ComputeBudgetExceeded(
        f"{servable.name}: long_text windows would cut this request into at least {rows} "
        f"windows of {limit} tokens (its texts hold at least {tokens} tokens; counting stopped "
        f"there), {needs} of compute under attention '{key.backend}' on this server, over its "
        f"per-request limit of {budget:.1f} s (max_request_compute_s); to fit: send at most "
        f"about {cap} tokens of text per request, split the text over several requests, or "
        "use truncate to embed only its start"
    )
