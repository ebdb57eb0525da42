"""The worker managers :mod:`.worker_managers` compares: how each starts, a running one (its
workers, its metrics folder), and the probes every scenario uses."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness.load import HOST
from benchmarks.harness.process import TEXT_MODEL, ServerProcess, free_port, server_env
from service.settings import Settings

ADAPTER = "benchmarks.service.worker_managers_app"
WORKERS = 2
GRACE_S = Settings().shutdown_grace_s


def _bin(name: str) -> str:
    script = Path(sys.executable).parent / name
    return str(script) if script.is_file() else name


@dataclass(frozen=True)
class Manager:
    """One worker manager: its name in the tables and its command for a port."""

    name: str
    command: Callable[[int], list[str]]
    own_metrics_dir: bool  # makes PROMETHEUS_MULTIPROC_DIR itself


def _ours(port: int) -> list[str]:
    return [_bin("attnserve"), "serve", "--workers", str(WORKERS), "--host", HOST,
            "--port", str(port)]  # fmt: skip


def _gunicorn(port: int) -> list[str]:
    return [
        _bin("gunicorn"), "-c", f"python:{ADAPTER}",
        "-k", f"{ADAPTER}.GuardedUvicornWorker", "-w", str(WORKERS),
        "-b", f"{HOST}:{port}",
        "--graceful-timeout", f"{GRACE_S:g}",
        "--timeout", "120",  # a worker must notify within this, and it cannot while loading
        "--log-level", "warning",
        f"{ADAPTER}:create_app()",
    ]  # fmt: skip


def _uvicorn(port: int) -> list[str]:
    s = Settings()
    return [
        _bin("uvicorn"), "--factory", f"{ADAPTER}:create_app", "--workers", str(WORKERS),
        "--host", HOST, "--port", str(port),
        "--http", f"{ADAPTER}:GuardedProtocol",
        "--h11-max-incomplete-event-size", str(s.max_header_bytes),
        "--timeout-keep-alive", str(s.keep_alive_timeout_s),
        "--timeout-graceful-shutdown", f"{GRACE_S:g}",
        # No --limit-concurrency: GuardedProtocol's registry holds the connection limits.
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


MANAGERS = {
    "ours": Manager("ours", _ours, True),
    "gunicorn": Manager("gunicorn", _gunicorn, False),
    "uvicorn": Manager("uvicorn", _uvicorn, False),
}
TITLES = {
    "ours": "ours (`attnserve serve --workers 2`)",
    "gunicorn": "gunicorn + UvicornWorker",
    "uvicorn": "`uvicorn --workers 2`",
}


# ----------------------------------------------------------------------------- processes


class Running(ServerProcess):
    """One manager started on a free port (in its own session, logging to a file), with a
    fresh prometheus-client multiprocess folder when it does not make its own."""

    def __init__(self, manager: Manager, log: Path, models: str = TEXT_MODEL) -> None:
        port = free_port()
        self.manager = manager
        self.metrics_dir = None if manager.own_metrics_dir else tempfile.mkdtemp(prefix="wm-")
        env = {
            **server_env(1),
            "ATTNSERVE_MODELS": models,
            "ATTNSERVE_DEVICE": "cpu",
            "ATTNSERVE_TORCH_THREADS": "1",
            "ATTNSERVE_LOG_LEVEL": "warning",
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if self.metrics_dir:
            env["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir
        super().__init__(manager.command(port), log, port, env, name=manager.name)
        self.started = time.monotonic()

    def workers(self) -> list[int]:
        """The manager's worker processes (not multiprocessing's resource tracker)."""
        return self.children(lambda command: "resource_tracker" not in command)

    def close(self) -> None:
        """Stop the manager's whole tree (the workers an orphaning manager left included) and
        remove its metrics folder."""
        self.stop()
        if self.metrics_dir:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)


def alive(p: psutil.Process) -> bool:
    """Whether ``p`` still runs (a zombie does not)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ----------------------------------------------------------------------------- probes


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def fresh(url: str, timeout: float = 10.0) -> httpx.AsyncClient:
    """A client that opens a new connection for every request (so any worker may answer)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits)


async def ask(client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> tuple[str, str]:
    """What a request got, in words (``HTTP 200``, ``refused``, ``no answer``, ...), and the
    answering process's request-id prefix ("" when none)."""
    try:
        r = await client.request(method, path, **kw)
    except httpx.ConnectError:
        return "connection refused", ""
    except httpx.TimeoutException:
        return "no answer", ""
    except httpx.HTTPError as exc:
        return f"connection dropped ({type(exc).__name__})", ""
    return f"HTTP {r.status_code}", r.headers.get("x-request-id", "").rsplit("-", 1)[0]


async def wait_serving(run: Running, timeout: float = 300.0) -> set[str]:
    """Post until ``WORKERS`` processes have answered; their request-id prefixes."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    async with fresh(run.url, timeout=5.0) as c:
        while len(seen) < WORKERS:
            if run.proc.poll() is not None:
                raise RuntimeError(f"{run.name} exited; see {run.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{run.name}: not serving; see {run.log_path}")
            outcome, prefix = await ask(c, "POST", "/encode", json={"inputs": "ready?"})
            if outcome == "HTTP 200":
                seen.add(prefix)
            else:
                await asyncio.sleep(0.2)
    return seen
