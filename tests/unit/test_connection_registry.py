"""The connection limits' decision (service.http.connections) without sockets: who is dropped
for a new connection, in which order, and when a new one is refused instead."""

from __future__ import annotations

import itertools

from service.http.connections import ConnectionRegistry, State


def registry(max_total: int, max_per_client: int) -> ConnectionRegistry:
    ticks = itertools.count()
    return ConnectionRegistry(max_total, max_per_client, clock=lambda: float(next(ticks)))


def admit_in(r: ConnectionRegistry, names: tuple[str, ...], client: str, state: State) -> None:
    """Admit each of ``names`` from ``client``, in order, and move it to ``state``."""
    for name in names:
        r.admit(name, client)
        r.move(name, state)


def test_below_the_limits_nothing_is_dropped() -> None:
    r = registry(3, 3)
    assert all(r.admit(name, "a").admitted for name in "xyz")
    assert r.count() == 3 and r.count(State.IDLE) == 3 and r.shed_total == 0


def test_at_the_limit_the_longest_waiting_goes_first_whatever_it_waits_in() -> None:
    r = registry(4, 10)
    for name in ("trickle", "slowloris", "kept-alive", "fresh"):
        r.admit(name, "a")
    r.move("trickle", State.HEADERS)
    r.move("trickle", State.BODY)  # bytes of a request do not restart its clock
    r.move("slowloris", State.HEADERS)
    r.move("kept-alive", State.ACTIVE)
    r.move("kept-alive", State.IDLE)  # answered: waiting again from now, the newest wait
    assert r.admit("n1", "b").shed == ("trickle",)
    assert r.admit("n2", "b").shed == ("slowloris",)
    # A connection that just arrived (a probe whose request is not read yet) is idle too, and
    # outlives the ones that waited before it.
    assert r.admit("n3", "b").shed == ("fresh",)
    assert r.admit("n4", "b").shed == ("kept-alive",)
    assert r.state("trickle") is None and r.shed_total == 4 and r.count() == 4


def test_active_connections_are_never_dropped_a_new_one_is_refused() -> None:
    r = registry(2, 10)
    admit_in(r, ("p", "q"), "a", State.ACTIVE)
    refused = r.admit("new", "b")
    assert not refused.admitted and refused.shed == () and "busy" in refused.reason
    assert r.state("new") is None and r.count() == 2 and r.refused_total == 1
    r.forget("p")  # one finishes and closes: room again
    assert r.admit("new", "b").admitted


def test_one_client_past_its_cap_loses_its_own_oldest_stalled_connection() -> None:
    r = registry(100, 3)
    admit_in(r, ("a1", "a2", "a3"), "10.0.0.1", State.HEADERS)
    r.admit("b1", "10.0.0.2")  # another client's idle connection is not touched
    r.move("a1", State.ACTIVE)
    assert r.admit("a4", "10.0.0.1").shed == ("a2",)
    assert r.count(client="10.0.0.1") == 3 and r.state("b1") is State.IDLE


def test_one_client_whose_connections_are_all_busy_is_refused() -> None:
    r = registry(100, 2)
    admit_in(r, ("a1", "a2"), "10.0.0.1", State.ACTIVE)
    answer = r.admit("a3", "10.0.0.1")
    assert not answer.admitted and "this address" in answer.reason
    assert r.admit("b1", "10.0.0.2").admitted


def test_forget_is_idempotent_and_frees_the_client() -> None:
    r = registry(2, 1)
    r.admit("a", "c")
    r.forget("a")
    r.forget("a")
    assert r.count() == 0 and r.count(client="c") == 0
    assert r.admit("b", "c").shed == ()


def test_a_lingering_connection_is_dropped_before_any_waiting_one() -> None:
    # Lingering (answered, discarding the rest of a refused body) is a courtesy, not work: it
    # goes first, even before a connection that has waited longer, for any client's newcomer.
    r = registry(3, 2)
    for name in ("stalled", "idle", "lingering"):
        r.admit(name, "a" if name != "idle" else "b")
    r.move("stalled", State.BODY)
    r.move("lingering", State.ACTIVE)
    r.move("lingering", State.LINGER)
    assert r.admit("new", "c").shed == ("lingering",)
    assert r.state("stalled") is State.BODY


def test_a_client_past_its_cap_loses_its_lingering_connection_first() -> None:
    r = registry(100, 2)
    for name in ("stalled", "lingering"):
        r.admit(name, "a")
    r.move("stalled", State.HEADERS)
    r.move("lingering", State.ACTIVE)
    r.move("lingering", State.LINGER)
    assert r.admit("new", "a").shed == ("lingering",)
