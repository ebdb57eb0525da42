"""The servers under test: how each starts, what a request looks like, where its answer's
embedding is, and a subprocess wrapper that starts, probes and stops one.

Every server gets the same torch intra-op thread count, set both ways: the environment
(``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, read when torch loads) and the server's own setting
where it has one (``attnserve --torch-threads``, ``torch.set_num_threads`` in the two apps here;
infinity-emb has no thread option and goes by the environment). No server may reach a model hub
(``HF_HUB_OFFLINE``) or send usage statistics.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.peers.driver import build_request, call_once

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
MODEL = "all-MiniLM-L6-v2"
BATCH = 32


@dataclass(frozen=True)
class Launch:
    """What every server command is built from."""

    port: int
    threads: int
    folder: Path  # the sentence-transformers folder the peers load
    python: Path  # attnserve's interpreter (the project's .venv)
    peers_python: Path  # LitServe's and the naive server's interpreter (.venv-peers)
    infinity_python: Path  # infinity-emb's interpreter (.venv-peers-infinity)

    @classmethod
    def on_free_port(cls, args: argparse.Namespace, folder: Path) -> Launch:
        """A launch on a free port, with a peers run's ``--threads`` and interpreters."""
        return cls(
            free_port(),
            args.threads,
            folder,
            Path(sys.executable),
            args.peers_python,
            args.infinity_python,
        )


@dataclass(frozen=True)
class Peer:
    """One server under test.

    Attributes:
        name: the key on the command line and in the results.
        path: the route one text is posted to.
        body: the JSON body for one text.
        embedding: the embedding in a decoded 2xx answer.
        command: the command line that starts it.
        interpreter: which interpreter runs it (``attnserve``, ``peers`` or ``infinity``).
        packages: distributions whose versions go with its results.
        config: its batching and threading configuration, in words.
    """

    name: str
    path: str
    body: Callable[[str], dict[str, Any]]
    embedding: Callable[[Any], list[float]]
    command: Callable[[Launch], list[str]]
    interpreter: str
    packages: tuple[str, ...]
    config: str


def attnserve_command(launch: Launch) -> list[str]:
    """How to run ``attnserve`` with ``launch.python``: its console script, else ``-m service``."""
    script = launch.python.parent / "attnserve"
    return [str(script)] if script.is_file() else [str(launch.python), "-m", "service"]


def _attnserve(launch: Launch) -> list[str]:
    return [
        *attnserve_command(launch), "serve",
        "--host", HOST,
        "--port", str(launch.port),
        "--device", "cpu",
        "--models", MODEL,
        "--torch-threads", str(launch.threads),
        "--max-batch-size", str(BATCH),
        "--log-level", "warning",
    ]  # fmt: skip


def _litserve(launch: Launch) -> list[str]:
    return [
        str(launch.peers_python), "-m", "benchmarks.peers.litserve_app",
        "--folder", str(launch.folder),
        "--host", HOST,
        "--port", str(launch.port),
        "--threads", str(launch.threads),
    ]  # fmt: skip


def _infinity(launch: Launch) -> list[str]:
    return [
        str(launch.infinity_python.parent / "infinity_emb"), "v2",
        "--model-id", str(launch.folder),
        "--served-model-name", MODEL,
        "--engine", "torch",
        "--device", "cpu",
        "--batch-size", str(BATCH),
        "--no-vector-disk-cache",  # a cache hit on a repeated text would skip the model
        "--host", HOST,
        "--port", str(launch.port),
        "--log-level", "warning",
    ]  # fmt: skip


def _naive(launch: Launch) -> list[str]:
    return [
        str(launch.peers_python), "-m", "benchmarks.peers.naive_app",
        "--folder", str(launch.folder),
        "--host", HOST,
        "--port", str(launch.port),
        "--threads", str(launch.threads),
    ]  # fmt: skip


_ST = ("sentence-transformers", "transformers", "torch")
PEERS: dict[str, Peer] = {
    "attnserve": Peer(
        "attnserve",
        "/encode",
        lambda text: {"inputs": text},
        lambda answer: answer["embeddings"][0],
        _attnserve,
        "attnserve",
        ("attnserve", "torch", "fastapi", "uvicorn"),
        f"attnserve serve, max batch {BATCH}, max wait 5 ms (its defaults), attention flash",
    ),
    "litserve": Peer(
        "litserve",
        "/predict",
        lambda text: {"input": text},
        lambda answer: answer["embedding"],
        _litserve,
        "peers",
        ("litserve", *_ST, "fastapi", "uvicorn"),
        f"LitAPI max_batch_size={BATCH}, batch_timeout=0.01, one worker, accelerator cpu, "
        "fast_queue off (its default)",
    ),
    "infinity": Peer(
        "infinity",
        "/embeddings",
        lambda text: {"input": [text], "model": MODEL},
        lambda answer: answer["data"][0]["embedding"],
        _infinity,
        "infinity",
        ("infinity-emb", *_ST, "fastapi", "uvicorn"),
        f"infinity_emb v2 --engine torch --device cpu --batch-size {BATCH}, no disk cache",
    ),
    "naive": Peer(
        "naive",
        "/encode",
        lambda text: {"inputs": text},
        lambda answer: answer["embeddings"][0],
        _naive,
        "peers",
        (*_ST, "fastapi", "uvicorn"),
        "FastAPI def route (thread pool), one encode per request, no batching",
    ),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def server_env(threads: int, wait_policy: str = "passive") -> dict[str, str]:
    """The environment every server (and in-process row) runs in.

    ``wait_policy``: how idle OpenMP helper threads wait (``OMP_WAIT_POLICY``; ``default``
    leaves libgomp's own). attnserve exports ``PASSIVE`` itself (service/engine/batching/cpus.py); giving
    every server the same keeps the comparison about the servers, and on a machine shared with
    other work it is every torch server's best: spinning helpers there take the time slices the
    working thread needs (issue 37 item 2).
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


class ServerProcess:
    """One server in its own process group (LitServe and infinity start children)."""

    def __init__(self, peer: Peer, launch: Launch, log: Path, wait_policy: str = "passive") -> None:
        self.peer = peer
        self.port = launch.port
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            peer.command(launch),
            cwd=ROOT,
            env=server_env(launch.threads, wait_policy),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def request(self, text: str) -> bytes:
        """The request bytes for one text."""
        body = json.dumps(self.peer.body(text)).encode()
        return build_request(HOST, self.port, self.peer.path, body)

    def wait_answering(self, text: str, timeout: float = 300.0) -> list[float]:
        """Post ``text`` until a 2xx answer comes; the embedding in it (:meth:`first_answer`)."""
        return [
            float(x) for x in self.peer.embedding(self.first_answer(self.request(text), timeout))
        ]

    def first_answer(self, request: bytes, timeout: float = 300.0, per_call: float = 30.0) -> Any:
        """Post ``request`` until a 2xx answer comes; its JSON body.

        Raises:
            RuntimeError: the server exited, answered with an error that is not a start-up 503,
                or did not answer in ``timeout`` seconds (the message names its log).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.peer.name} exited; see {self.log_path}")
            try:
                status, body = call_once(HOST, self.port, request, timeout=per_call)
            except (OSError, EOFError, TimeoutError, ValueError):
                time.sleep(0.5)
                continue
            if 200 <= status < 300:
                return json.loads(body)
            if status not in (502, 503, 404):  # still starting (404: routes not mounted yet)
                raise RuntimeError(
                    f"{self.peer.name} answered {status}: {body[:300]!r}; see {self.log_path}"
                )
            time.sleep(0.5)
        raise RuntimeError(f"{self.peer.name} did not answer in {timeout} s; see {self.log_path}")

    def cpu_seconds(self) -> float:
        """User + system CPU seconds so far of the server and its descendants."""
        import psutil

        total = 0.0
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return total
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def _members(self) -> dict[int, Any]:
        """The server's live processes: its descendants, and anything else in its process group
        or session (a child whose parent died leaves the tree but keeps its group). Zombies are
        gone: they hold no CPU, and init reaps them."""
        import psutil

        pgid = self.proc.pid  # start_new_session: the server leads its own group and session
        found: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(pgid)
            found = {p.pid: p for p in [root, *root.children(recursive=True)]}
        except psutil.NoSuchProcess:
            pass
        for proc in psutil.process_iter():
            try:
                if pgid in (os.getpgid(proc.pid), os.getsid(proc.pid)):
                    found.setdefault(proc.pid, proc)
            except (OSError, psutil.Error):
                continue
        alive = {}
        for pid, proc in found.items():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive[pid] = proc
            except psutil.NoSuchProcess:
                continue
        return alive

    def stop(self, grace: float = 5.0) -> Stopped:
        """End the server's whole process tree and prove it is gone, so that none of it takes
        CPU from the next server measured: SIGTERM to its process group; whatever is still
        alive ``grace`` s later gets SIGKILL (LitServe's main process keeps spinning a core
        after SIGTERM, issue 37); then psutil must find no process of it left.

        Raises:
            RuntimeError: a process of the server survived SIGKILL (named in the message).
        """
        import psutil

        pgid = self.proc.pid
        started = time.monotonic()
        members = self._members()
        cpu_at_term = {pid: _cpu(p) for pid, p in members.items()}
        for proc in members.values():  # the group, and any member that left it
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = started + grace
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)  # reaps the leader, our child
        others = [p for pid, p in members.items() if pid != pgid]
        psutil.wait_procs(others, timeout=max(0.0, deadline - time.monotonic()))
        survivors = self._members()
        outlived = [
            f"{_name(p)} (pid {pid}, {_cpu(p) - cpu_at_term.get(pid, 0.0):.1f} CPU s "
            f"in the {grace:g} s after SIGTERM)"
            for pid, p in survivors.items()
        ]
        last = "SIGTERM"
        if survivors:
            last = "SIGKILL"
            for proc in survivors.values():
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5.0)
            psutil.wait_procs(list(survivors.values()), timeout=5.0)
        self._log.close()
        left = self._members()
        if left:
            names = ", ".join(f"{_name(p)} (pid {pid})" for pid, p in left.items())
            raise RuntimeError(f"{self.peer.name}: still running after SIGKILL: {names}")
        return Stopped(len(members), last, time.monotonic() - started, outlived)


def _cpu(proc: Any) -> float:
    """User + system CPU seconds of one psutil process so far (0 once it is gone)."""
    import psutil

    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _name(proc: Any) -> str:
    """A process's command line, short, for the record."""
    import psutil

    try:
        return " ".join(proc.cmdline()[:3])[:80] or proc.name()
    except psutil.Error:
        return "?"


def versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``packages`` in ``python``'s environment ("-" if missing)."""
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = '-'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script, *packages], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))


def default_peers_python() -> Path:
    return ROOT / ".venv-peers" / "bin" / "python"


def default_infinity_python() -> Path:
    return ROOT / ".venv-peers-infinity" / "bin" / "python"


def default_python() -> Path:
    return Path(sys.executable)


__all__ = [
    "HOST",
    "PEERS",
    "Launch",
    "Peer",
    "ServerProcess",
    "Stopped",
    "default_infinity_python",
    "default_peers_python",
    "default_python",
    "free_port",
    "versions",
]
