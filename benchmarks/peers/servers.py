"""The servers under test: how each starts, what a request looks like, where its answer's
embedding is, and what every peer run shares (its options, its interpreters, one server's turn).

Every server gets the same torch intra-op thread count, set both ways: the environment
(``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, read when torch loads) and the server's own setting
where it has one (``attnserve --torch-threads``, ``torch.set_num_threads`` in the two apps here;
infinity-emb has no thread option and goes by the environment). No server may reach a model hub
(``HF_HUB_OFFLINE``) or send usage statistics (:func:`benchmarks.harness.process.server_env`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.load import HOST, LoadResult, build_request, run_load, say
from benchmarks.harness.process import (
    ROOT,
    ServerProcess,
    Stopped,
    free_port,
    machine_cpu_seconds,
    server_env,
)

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
        path: the route one request is posted to.
        body: the JSON body for one item of the workload (a text, a rerank request).
        command: the command line that starts it.
        interpreter: which interpreter runs it (``attnserve``, ``peers`` or ``infinity``).
        packages: distributions whose versions go with its results.
        config: its batching and threading configuration, in words.
        embedding: the embedding in a decoded 2xx answer (embedding servers).
    """

    name: str
    path: str
    body: Callable[[Any], dict[str, Any]]
    command: Callable[[Launch], list[str]]
    interpreter: str
    packages: tuple[str, ...]
    config: str
    embedding: Callable[[Any], list[float]] = field(default=lambda answer: [])

    def request(self, port: int, item: Any) -> bytes:
        """The request bytes for one item of the workload, to a server on ``port``."""
        return build_request(HOST, port, self.path, json.dumps(self.body(item)).encode())


def attnserve_command(launch: Launch) -> list[str]:
    """How to run ``attnserve`` with ``launch.python``: its console script, else ``-m service``."""
    script = launch.python.parent / "attnserve"
    return [str(script)] if script.is_file() else [str(launch.python), "-m", "service"]


def attnserve_serve(models: str | None = None) -> Callable[[Launch], list[str]]:
    """``attnserve serve`` of ``models`` (default: the launch's folder) at max batch 32."""

    def command(launch: Launch) -> list[str]:
        return [
            *attnserve_command(launch), "serve",
            "--host", HOST, "--port", str(launch.port), "--device", "cpu",
            "--models", models or str(launch.folder),
            "--torch-threads", str(launch.threads),
            "--workers", "1",  # one process, as each peer runs here
            "--max-batch-size", str(BATCH),
            "--log-level", "warning",
        ]  # fmt: skip

    return command


def infinity_v2(served_name: str) -> Callable[[Launch], list[str]]:
    """``infinity_emb v2`` of the launch's folder under ``served_name`` at batch size 32."""

    def command(launch: Launch) -> list[str]:
        return [
            str(launch.infinity_python.parent / "infinity_emb"), "v2",
            "--model-id", str(launch.folder),
            "--served-model-name", served_name,
            "--engine", "torch", "--device", "cpu",
            "--batch-size", str(BATCH),
            "--no-vector-disk-cache",  # a cache hit on a repeated text would skip the model
            "--host", HOST, "--port", str(launch.port),
            "--log-level", "warning",
        ]  # fmt: skip

    return command


def peers_app(module: str, *options: str) -> Callable[[Launch], list[str]]:
    """One of the apps here (``benchmarks.peers.<module>``) with the peers' interpreter."""

    def command(launch: Launch) -> list[str]:
        return [
            str(launch.peers_python), "-m", f"benchmarks.peers.{module}",
            "--folder", str(launch.folder),
            "--host", HOST, "--port", str(launch.port),
            "--threads", str(launch.threads),
            *options,
        ]  # fmt: skip

    return command


_ST = ("sentence-transformers", "transformers", "torch")
PEERS: dict[str, Peer] = {
    "attnserve": Peer(
        "attnserve",
        "/encode",
        lambda text: {"inputs": text},
        attnserve_serve(MODEL),
        "attnserve",
        ("attnserve", "torch", "fastapi", "uvicorn"),
        f"attnserve serve, max batch {BATCH}, max wait 5 ms (its defaults), attention flash",
        lambda answer: answer["embeddings"][0],
    ),
    "litserve": Peer(
        "litserve",
        "/predict",
        lambda text: {"input": text},
        peers_app("litserve_app"),
        "peers",
        ("litserve", *_ST, "fastapi", "uvicorn"),
        f"LitAPI max_batch_size={BATCH}, batch_timeout=0.01, one worker, accelerator cpu, "
        "fast_queue off (its default)",
        lambda answer: answer["embedding"],
    ),
    "infinity": Peer(
        "infinity",
        "/embeddings",
        lambda text: {"input": [text], "model": MODEL},
        infinity_v2(MODEL),
        "infinity",
        ("infinity-emb", *_ST, "fastapi", "uvicorn"),
        f"infinity_emb v2 --engine torch --device cpu --batch-size {BATCH}, no disk cache",
        lambda answer: answer["data"][0]["embedding"],
    ),
    "naive": Peer(
        "naive",
        "/encode",
        lambda text: {"inputs": text},
        peers_app("naive_app"),
        "peers",
        (*_ST, "fastapi", "uvicorn"),
        "FastAPI def route (thread pool), one encode per request, no batching",
        lambda answer: answer["embeddings"][0],
    ),
}


class PeerServer(ServerProcess):
    """A peer started with :func:`benchmarks.harness.process.server_env` (or ``env``) on its
    launch's port; its requests are built from the workload's items by the peer's ``body``."""

    def __init__(
        self,
        peer: Peer,
        launch: Launch,
        log: Path,
        wait_policy: str = "passive",
        env: Mapping[str, str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        env = server_env(launch.threads, wait_policy) if env is None else env
        super().__init__(command or peer.command(launch), log, launch.port, env, name=peer.name)
        self.peer = peer

    def request(self, item: Any) -> bytes:
        """The request bytes for one item of the workload."""
        return self.peer.request(self.port, item)

    def wait_answering(self, item: Any, timeout: float = 300.0, per_call: float = 30.0) -> Any:
        """Post ``item`` until a 2xx answer comes; its JSON body (see ``first_answer``)."""
        return self.first_answer(self.request(item), timeout, per_call)


@dataclass
class Turn:
    """One server's turn in a round: its results and load averages by client count, how it
    ended."""

    startup_s: float = 0.0
    results: dict[int, LoadResult] = field(default_factory=dict)
    stopped: Stopped | None = None


def take_turn(
    server: PeerServer,
    first: Any,
    items: list[Any],
    args: argparse.Namespace,
    tag: str,
    check: Callable[[PeerServer, Any], None] = lambda server, answer: None,
) -> Turn:
    """Wait until ``server`` answers ``first`` (``check`` judges it and that answer), drive it with
    ``items`` at each ``--clients`` count (its CPU and the machine's probed), then stop it and
    check none of its process tree is left, whatever happened."""
    turn = Turn()
    started = time.monotonic()
    label = f"{tag} {server.name:>10}"
    try:
        answer = server.wait_answering(first, per_call=60.0)
        turn.startup_s = time.monotonic() - started
        check(server, answer)
        wire = [server.request(item) for item in items]
        probes = {"server": server.cpu_seconds, "machine": machine_cpu_seconds}
        for clients in args.clients:
            result = run_load(HOST, server.port, wire, clients, args.seconds, args.warmup, probes)
            turn.results[clients] = result
            say(f"{label} x{clients:<3}", result)
    finally:
        turn.stopped = stopped = server.stop()
        outlived = f"; outlived SIGTERM: {stopped.outlived_term}" if stopped.outlived_term else ""
        print(
            f"  {label} stopped: {stopped.processes} process(es), gone after {stopped.signal} in "
            f"{stopped.seconds:.1f} s{outlived}",
            flush=True,
        )
    return turn


def run_rounds(
    args: argparse.Namespace, peers: Mapping[str, Peer], folder: Path, first: Any,
    items: list[Any], check: Callable[[PeerServer, Any], None], tag: str,
) -> dict[str, list[Turn]]:  # fmt: skip
    """``--rounds`` rounds of :func:`take_turn`, the servers in ``--servers`` order within each
    (drift over the run hits all alike); logs ``<name>-<tag>-r<round>.log`` in ``--log-dir``."""
    turns: dict[str, list[Turn]] = {name: [] for name in args.servers}
    for k in range(1, args.rounds + 1):
        print(f"round {k} of {args.rounds} ...", flush=True)
        for name in args.servers:
            launch, log = Launch.on_free_port(args, folder), args.log_dir / f"{name}-{tag}-r{k}.log"
            server = PeerServer(peers[name], launch, log, args.omp_wait_policy)
            turns[name].append(take_turn(server, first, items, args, f"{tag}-r{k}", check))
    return turns


def peer_options(names: list[str]) -> argparse.ArgumentParser:
    """What every peer run takes: load, rounds, threads, servers, interpreters, where to write
    (the defaults of ``--clients``, ``--seconds``, ``--warmup`` and ``--name`` are the task's)."""
    p = argparse.ArgumentParser(
        add_help=False, parents=[cli.threads(2, "torch threads per server")]
    )
    p.add_argument("--seconds", type=float, help="measured seconds per run")
    p.add_argument("--warmup", type=float, help="unmeasured seconds first")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--clients", type=int, nargs="+")
    p.add_argument("--servers", nargs="+", default=names, choices=names)
    p.add_argument(
        "--omp-wait-policy",
        choices=["passive", "active", "default"],
        default="passive",
        help="OMP_WAIT_POLICY for every server and in-process row (ONNX Runtime: spinning off "
        "for passive); default: libgomp's own",
    )
    p.add_argument("--repeats", type=int, default=3, help="in-process passes (best kept)")
    p.add_argument("--peers-python", type=Path, default=ROOT / ".venv-peers" / "bin" / "python",
                   help="LitServe's and the naive server's interpreter (make peers-venv)")  # fmt: skip
    p.add_argument("--infinity-python", type=Path,
                   default=ROOT / ".venv-peers-infinity" / "bin" / "python",
                   help="infinity-emb's interpreter (make peers-venv)")  # fmt: skip
    p.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--name", help="results file name, no suffix")
    p.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()))
    return p


def interpreters(args: argparse.Namespace, peers: Mapping[str, Peer]) -> dict[str, Path]:
    """Each interpreter by its role; exits naming the first missing one a chosen server needs.
    Under ``--smoke`` the servers whose interpreter is missing are dropped instead (and said)."""
    pythons = {"attnserve": Path(sys.executable), "peers": args.peers_python,
               "infinity": args.infinity_python}  # fmt: skip
    missing = [n for n in args.servers if not pythons[peers[n].interpreter].is_file()]
    if missing and args.smoke:
        print(f"smoke: no interpreter for {missing} (make peers-venv); attnserve's part only")
        args.servers = [n for n in args.servers if n not in missing]
    elif missing:
        python = pythons[peers[missing[0]].interpreter]
        raise SystemExit(f"{python} is missing ({missing[0]}): make peers-venv")
    return pythons


def in_process(
    impl: str, python: Path, args: argparse.Namespace, *options: str, inputs: tuple[str, Any]
) -> dict[str, Any]:
    """One in-process measurement (``python -m benchmarks.peers.inprocess impl ...``) in its own
    process with the servers' environment, given ``inputs`` (an option and the JSON data it
    names: ``("--texts", texts)``); the JSON it writes."""
    with tempfile.TemporaryDirectory() as tmp:
        out, data = Path(tmp) / "result.json", Path(tmp) / "inputs.json"
        data.write_text(json.dumps(inputs[1]))
        command = [
            str(python), "-m", "benchmarks.peers.inprocess", impl, "--out", str(out),
            "--threads", str(args.threads), "--repeats", str(args.repeats), *options,
            inputs[0], str(data),
        ]  # fmt: skip
        env = server_env(args.threads, args.omp_wait_policy)
        subprocess.run(command, cwd=ROOT, env=env, check=True)
        return dict(json.loads(out.read_text()))


def by_run(
    turns: Mapping[str, list[Turn]], clients: list[int]
) -> dict[tuple[str, int], list[LoadResult]]:
    """Each run's results (a server at a client count), one per round."""
    return {(name, c): [t.results[c] for t in turns[name]] for name in turns for c in clients}
