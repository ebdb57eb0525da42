"""Server processes under test: start one in its own session, wait until it answers, read the CPU
time of its whole process tree, and end that tree and prove it is gone.

Every benchmark that starts a server goes through :class:`ServerProcess`; :func:`attnserve`
builds the usual ``python -m service serve`` one. Stopping is the same for all: SIGTERM to the
process group, SIGKILL for whatever outlives a grace, then psutil must find none of its
processes left, so nothing of one server takes CPU from the next one measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.harness.load import HOST, build_request, call_once

ROOT = Path(__file__).resolve().parents[2]
TEXT_MODEL = "all-MiniLM-L6-v2"


def free_port() -> int:
    """A TCP port on :data:`HOST` that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def server_env(threads: int, wait_policy: str = "passive") -> dict[str, str]:
    """The environment a torch server (or an in-process row) runs in, for ``threads`` intra-op
    threads, offline and without usage statistics.

    ``wait_policy``: how idle OpenMP helper threads wait (``OMP_WAIT_POLICY``; ``default``
    leaves libgomp's own). attnserve exports ``PASSIVE`` itself (service/engine/batching/cpus.py);
    giving every server the same keeps the comparison about the servers, and on a machine shared
    with other work it is every torch server's best: spinning helpers there take the time slices
    the working thread needs (issue 37 item 2).
    """
    policy = {} if wait_policy == "default" else {"OMP_WAIT_POLICY": wait_policy.upper()}
    return {
        **{k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"},
        **policy,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "INFINITY_ANONYMOUS_USAGE_STATS": "0",
    }


def process_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of one process so far (0 once it is gone)."""
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU seconds so far of process ``pid`` and (``children``) its descendants:
    the workers of a ``--workers N`` server (0 once it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *(root.children(recursive=True) if children else [])]
    except psutil.NoSuchProcess:
        return 0.0
    return sum(process_cpu(p) for p in procs)


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far (all cores; idle, I/O wait and time stolen
    by a hypervisor left out)."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0) + getattr(t, "steal", 0.0)
    return float(sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


def _name(proc: psutil.Process) -> str:
    """A process's command line, short, for the record."""
    try:
        return " ".join(proc.cmdline()[:3])[:80] or proc.name()
    except psutil.Error:
        return "?"


@dataclass(frozen=True)
class Stopped:
    """How a server's process tree ended, recorded with the results.

    Attributes:
        processes: its live processes when it was stopped (tree, group and session).
        signal: the last signal needed: ``SIGTERM``, or ``SIGKILL`` when a process outlived the
            grace after SIGTERM.
        seconds: from SIGTERM until psutil found none of its processes left.
        outlived_term: each process still alive ``grace`` s after SIGTERM, with the CPU seconds
            it burned in that time (one that spins shows about ``grace`` CPU s per core).
    """

    processes: int
    signal: str
    seconds: float
    outlived_term: list[str]


def _finally_on_sigterm() -> None:
    """Make SIGTERM to the benchmark (``kill``, ``pkill -f``) raise ``SystemExit`` in the main
    thread, so the ``finally`` that stops its server runs: by default SIGTERM ends the driver at
    once and leaves the server, in its own session, running (and taking CPU from the next one
    measured). A handler someone else installed is left alone."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


class ServerProcess:
    """A server started in its own process group and session (LitServe, infinity and a
    ``--workers N`` attnserve start children), its output in ``log``.

    Attributes:
        name: what messages call it.
        port: where it listens (on :data:`HOST`); ``url`` is its base URL.
        proc: the leader process.
    """

    def __init__(
        self,
        command: Sequence[str],
        log: Path,
        port: int,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
        name: str | None = None,
    ) -> None:
        _finally_on_sigterm()
        self.name = name or Path(command[0]).name
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env) if env is not None else {**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def post(self, path: str, body: Any) -> bytes:
        """The request bytes of ``POST path`` with ``body`` as JSON."""
        return build_request(HOST, self.port, path, json.dumps(body).encode())

    def first_answer(self, request: bytes, timeout: float = 300.0, per_call: float = 30.0) -> Any:
        """Send ``request`` until a 2xx answer comes; its JSON body.

        Raises:
            RuntimeError: the server exited, answered with an error that is not a start-up one
                (502, 503, 404 before its routes are mounted), or did not answer in ``timeout``
                seconds (the message names its log).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log_path}")
            try:
                status, body = call_once(HOST, self.port, request, timeout=per_call)
            except (OSError, EOFError, TimeoutError, ValueError):
                time.sleep(0.25)
                continue
            if 200 <= status < 300:
                return json.loads(body)
            if status not in (502, 503, 404):
                raise RuntimeError(
                    f"{self.name} answered {status}: {body[:300]!r}; see {self.log_path}"
                )
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} did not answer in {timeout} s; see {self.log_path}")

    def wait_ready(self, path: str = "/readyz", timeout: float = 300.0) -> None:
        """Wait until ``GET path`` answers 2xx (attnserve's readiness route by default)."""
        self.first_answer(build_request(HOST, self.port, path, method="GET"), timeout, 2.0)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds so far of the server and its descendants."""
        return cpu_seconds(self.proc.pid)

    def children(self, keep: Callable[[str], bool] = lambda command: True) -> list[int]:
        """The pids of the leader's direct children (a supervisor's workers) whose command line
        ``keep`` accepts, sorted; none once the leader is gone."""
        out = []
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.proc.pid).children():
                with contextlib.suppress(psutil.Error):
                    if keep(" ".join(child.cmdline())):
                        out.append(child.pid)
        return sorted(out)

    def members(self) -> dict[int, psutil.Process]:
        """The server's live processes: its descendants, and anything else in its process group
        or session (a child whose parent died leaves the tree but keeps its group). Zombies are
        gone: they hold no CPU, and init reaps them."""
        pgid = self.proc.pid  # start_new_session: the server leads its own group and session
        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pgid)
            found = {p.pid: p for p in [root, *root.children(recursive=True)]}
        for proc in psutil.process_iter():
            try:
                if pgid in (os.getpgid(proc.pid), os.getsid(proc.pid)):
                    found.setdefault(proc.pid, proc)
            except (OSError, psutil.Error):
                continue
        alive = {}
        for pid, proc in found.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive[pid] = proc
        return alive

    def _signal(self, procs: Iterator[psutil.Process], sig: signal.Signals) -> None:
        """``sig`` to each of ``procs`` and to the server's process group."""
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, grace: float = 5.0) -> Stopped:
        """End the server's whole process tree and prove it is gone, so that none of it takes
        CPU from the next server measured: SIGTERM to its process group (and to any member that
        left it); whatever is still alive ``grace`` s later gets SIGKILL (LitServe's main process
        keeps spinning a core after SIGTERM, issue 37); then psutil must find none of it left.

        Raises:
            RuntimeError: a process of the server survived SIGKILL (named in the message).
        """
        started = time.monotonic()
        members = self.members()
        cpu_at_term = {pid: process_cpu(p) for pid, p in members.items()}
        self._signal(iter(members.values()), signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)  # reaps the leader, our child
        others = [p for pid, p in members.items() if pid != self.proc.pid]
        psutil.wait_procs(others, timeout=max(0.0, started + grace - time.monotonic()))
        survivors = self.members()
        outlived = [
            f"{_name(p)} (pid {pid}, {process_cpu(p) - cpu_at_term.get(pid, 0.0):.1f} CPU s "
            f"in the {grace:g} s after SIGTERM)"
            for pid, p in survivors.items()
        ]
        last = "SIGTERM"
        if survivors:
            last = "SIGKILL"
            self._signal(iter(survivors.values()), signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5.0)
            psutil.wait_procs(list(survivors.values()), timeout=5.0)
        self._log.close()
        left = self.members()
        if left:
            names = ", ".join(f"{_name(p)} (pid {pid})" for pid, p in left.items())
            raise RuntimeError(f"{self.name}: still running after SIGKILL: {names}")
        return Stopped(len(members), last, time.monotonic() - started, outlived)


def attnserve(
    models: Sequence[str],
    threads: int,
    max_batch_size: int,
    log: Path,
    workers: int = 1,
    device: str = "cpu",
    extra: Sequence[str] = (),
) -> ServerProcess:
    """``python -m service serve`` from this checkout on a free port: ``threads``
    torch threads (0: torch's default), max queue 1024, warnings only in its log."""
    port = free_port()
    command = [
        sys.executable, "-m", "service", "serve",
        "--port", str(port),
        "--models", ",".join(models),
        "--device", device,
        "--torch-threads", str(threads),
        "--max-batch-size", str(max_batch_size),
        "--workers", str(workers),
        "--max-queue", "1024",
        "--log-level", "warning",
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return ServerProcess(command, log, port, env=env, cwd=ROOT, name="attnserve")


@contextlib.contextmanager
def neighbour(on: bool = True) -> Iterator[None]:
    """A process spinning one core for the block's duration (``on``), ended and checked gone."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)
        if psutil.pid_exists(proc.pid) and psutil.Process(proc.pid).status() != "zombie":
            raise RuntimeError(f"neighbour {proc.pid} still running")
