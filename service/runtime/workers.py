"""Several server processes on one port: ``attnserve serve --workers N`` (CPU hosts; by default one
per usable CPU, see :mod:`service.runtime.auto_workers`).

Why: one server process uses about one core at most, however many the host has, because its
event loop (HTTP, validation, JSON) and its model's Python-side dispatch share one GIL. Measured
on the 2-vCPU CI machine with 32 clients: the server process sat at 1.0 core while the machine
was 40 % idle. With N processes each has its own models, queue, batcher and event loop, and
listens on the port with ``SO_REUSEPORT``: the kernel spreads new connections across them by a
hash of the client's address and port. (Not one shared socket: there a worker that wakes first
accepts a whole burst of connections, and with keep-alive clients one worker then serves nearly
all the load; measured, 16 connections often all landed on one of two workers.)

The supervisor (the parent process, which loads no model):

* holds the port (bound, not listening, so it takes no connections and stays reserved while a
  worker restarts), gives prometheus-client's multiprocess mode a directory (so any worker's
  ``/metrics`` covers all of them) and spawns the workers (spawn, not fork: torch's threads and
  state do not survive a fork);
* on SIGTERM or SIGINT sends SIGTERM to every worker; each drains as a single server does
  (``/readyz`` 503, new model requests 503, admitted ones answered within the grace) and exits.
  A second signal is forwarded too, and stops the workers at once;
* replaces a worker killed by a signal (the OOM killer, ``kill -9``) or stopped on its own;
  when a worker exits with an error (its start-up failed: bad model name, missing weights) it
  stops the rest and exits 1, since a replacement would fail the same way.

Workers run in their own process group, so a terminal's Ctrl-C reaches only the supervisor (a
second signal sent straight to a draining worker would cut its drain short), and each watches its
parent: a worker whose supervisor died without a word drains and exits.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from service.engine.batching.cpus import available_cpus
from service.observability.logs import configure_logging
from service.observability.metrics import MULTIPROC_ENV
from service.runtime.auto_workers import WorkerChoice, omp_num_threads
from service.settings import Settings

log = logging.getLogger("attnserve")

# Extra time past the drain grace before the supervisor kills a worker that has not exited.
KILL_MARGIN_S = 15.0


def worker_settings(
    settings: Settings, cpus: int | None = None, environ: Mapping[str, str] = os.environ
) -> Settings:
    """The settings each worker runs with: ``workers`` stays the number of processes (the
    default batch memory budget is split among them); ``torch_threads`` per worker is the
    setting, else ``OMP_NUM_THREADS`` (a team size per process, not a total), else the CPUs the
    process may use (:func:`~service.engine.batching.cpus.available_cpus`) shared out among the
    workers, so they do not oversubscribe; and no background load: a worker takes connections from the shared socket only once its
    models are warm, so one that starts late (or replaces a dead one) never answers 503 while
    its peers could serve."""
    assert settings.workers > 0, "resolve workers auto first (service.runtime.auto_workers)"
    cpus = cpus or available_cpus()  # the quota and affinity mask too, not just the host's
    threads = settings.torch_threads or omp_num_threads(environ) or max(1, cpus // settings.workers)
    return settings.model_copy(update={"torch_threads": threads, "background_load": False})


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT`` (port 0: a free one), not yet
    listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def run_worker(settings: Settings, port: int, supervisor_pid: int) -> None:
    """A worker process's entry point: listen on ``port`` beside the other workers and serve;
    exits with the server's status."""
    os.setpgrp()  # out of the terminal's process group: Ctrl-C goes to the supervisor only
    from service.engine.batching.device import (
        select_device,  # torch and the app: in the worker only
    )
    from service.lifecycle import Phase
    from service.runtime.fd_limit import raise_fd_limit
    from service.runtime.server import build_server

    configure_logging(settings)
    raise_fd_limit(settings.max_connections)  # the limit is per process: each worker raises its own
    if settings.device == "auto" and select_device("auto").type != "cpu":
        log.error("workers > 1 runs on CPU only, and this host has a GPU: pass --workers 1 "
                  "(one process owns the GPU) or --device cpu")  # fmt: skip
        sys.exit(1)
    sock = reuse_port_socket(settings.host, port)
    sock.listen(2048)

    def orphaned() -> str | None:
        # A worker whose supervisor died (killed without a word) is re-parented.
        gone = os.getppid() != supervisor_pid
        return f"the supervisor (pid {supervisor_pid}) is gone" if gone else None

    server = build_server(settings.model_copy(update={"device": "cpu"}), exit_when=orphaned)
    server.run(sockets=[sock])
    sys.exit(1 if server.state.lifecycle.phase is Phase.FAILED else 0)


class Supervisor:
    """Starts ``settings.workers`` server processes on one port, keeps them running, and stops
    them (see the module docstring)."""

    def __init__(self, settings: Settings, choice: WorkerChoice | None = None) -> None:
        self.settings = settings
        self.choice = choice or WorkerChoice(settings.workers, "set explicitly")
        self.worker_settings = worker_settings(settings)
        self.workers: list[BaseProcess] = []
        self.stopping = threading.Event()
        self.failed = False
        self._spawn = multiprocessing.get_context("spawn")

    def run(self) -> int:
        """Serve until a signal (or a worker's failed start-up). Returns the exit status: 0, or
        1 when a worker failed."""
        own_dir = not os.environ.get(MULTIPROC_ENV)
        metrics_dir = Path(os.environ.get(MULTIPROC_ENV) or tempfile.mkdtemp(prefix="attnserve-"))
        os.environ[MULTIPROC_ENV] = str(metrics_dir)  # the spawned workers inherit it
        for stale in metrics_dir.glob("*.db"):  # values of an earlier run would add up
            stale.unlink()
        reservation = reuse_port_socket(self.settings.host, self.settings.port)
        port = reservation.getsockname()[1]
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._forward)
        try:
            self.workers = [self._start(port) for _ in range(self.settings.workers)]
            log.info(
                "supervisor %d: %d workers, %d torch threads each (%s), pids %s, on %s:%d",
                os.getpid(),
                len(self.workers),
                self.worker_settings.torch_threads,
                self.choice.reason,
                ", ".join(str(w.pid) for w in self.workers),
                self.settings.host,
                port,
            )
            while not self.stopping.wait(0.5):
                self._replace_dead(port)
            self._wait_all(self.settings.shutdown_grace_s + KILL_MARGIN_S)
        finally:
            reservation.close()
            if own_dir:
                shutil.rmtree(metrics_dir, ignore_errors=True)
        return 1 if self.failed else 0

    def _start(self, port: int) -> BaseProcess:
        proc = self._spawn.Process(
            target=run_worker,
            args=(self.worker_settings, port, os.getpid()),
            name="attnserve-worker",
        )
        proc.start()
        return proc

    def _forward(self, sig: int, frame: FrameType | None) -> None:
        log.info("supervisor: signal %d, stopping the workers", sig)
        self.stopping.set()
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, sig: int) -> None:
        for proc in self.workers:
            if proc.exitcode is None and proc.pid is not None:
                os.kill(proc.pid, sig)

    def _replace_dead(self, port: int) -> None:
        from prometheus_client import multiprocess

        for i, proc in enumerate(self.workers):
            code = proc.exitcode
            if code is None or self.stopping.is_set():
                continue
            assert proc.pid is not None
            multiprocess.mark_process_dead(proc.pid)  # its live gauges stop counting
            if code <= 0:  # killed by a signal, or stopped on its own by a SIGTERM sent to it
                log.warning("worker %d ended (status %d); starting another", proc.pid, code)
                self.workers[i] = self._start(port)
            else:
                log.error("worker %d exited with status %d; stopping", proc.pid, code)
                self.failed = True
                self.stopping.set()
                self._signal_all(signal.SIGTERM)

    def _wait_all(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in self.workers:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                log.error("worker %d did not stop in %.0f s; killing it", proc.pid, timeout_s)
                proc.kill()
                proc.join()
