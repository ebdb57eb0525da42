"""The real server (``python -m service serve``) in a subprocess on a free port, and the bursts
and waits its end-to-end tests share."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import httpx

from tests.service.conftest import metric
from tests.utils.live_server import free_port

ROOT = Path(__file__).resolve().parents[2]
# ~200 tokens each: batches of four take long enough on CPU for queues to form.
LONG_TEXT = " ".join(f"sentence {i} about transformers and attention." for i in range(28))


class ServerProcess:
    """``python -m service serve --models ... <args>`` on CPU with one torch thread (and one
    process, unless ``args`` names ``--workers``), its log in ``log_path``."""

    def __init__(self, log_path: Path, models: Sequence[str], args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTNSERVE_LOG_LEVEL": "info"}
        command = [
            sys.executable, "-m", "service", "serve",
            "--port", str(self.port),
            "--models", ",".join(models),
            "--device", "cpu",
            "--torch-threads", "1",
            "--workers", "1",  # one process unless ``args`` says otherwise (the last flag wins)
            *args,
        ]  # fmt: skip
        self.log = log_path.open("w")
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"server not ready in {timeout} s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()

    @contextmanager
    def serving(self) -> Iterator[Self]:
        """This server once ready (a fixture yields it); stopped however the block ends."""
        try:
            self.wait_ready()
            yield self
        finally:
            self.stop()


def start_up_failure(*args: str) -> str:
    """Run ``python -m service serve <args>`` on CPU (port 0, one torch thread) and expect it to
    stop at start-up: exit status 1 and no traceback. Returns what it wrote (stdout, then stderr).
    """
    command = [
        sys.executable, "-m", "service", "serve",
        "--workers", "1",  # one process unless ``args`` says otherwise (the last flag wins)
        *args,
        "--device", "cpu", "--port", "0", "--torch-threads", "1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    return output


def long_text_burst(client: httpx.AsyncClient, n: int) -> list[asyncio.Task[httpx.Response]]:
    """``n`` concurrent ``/encode`` requests of one long text each, as tasks."""
    return [
        asyncio.create_task(client.post("/encode", json={"inputs": [f"{i} {LONG_TEXT}"]}))
        for i in range(n)
    ]


async def wait_until_admitted(client: httpx.AsyncClient, n: int, answered_before: float) -> float:
    """Wait until ``n`` ``/encode`` requests sent after a scrape that counted
    ``answered_before`` are all admitted (in flight or answered); returns the number in flight
    then."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        scrape = (await client.get("/metrics")).text
        in_flight = metric(scrape, "attnserve_requests_in_flight")
        answered = metric(scrape, "attnserve_requests_total", endpoint="/encode")
        if in_flight + answered - answered_before >= n:
            return in_flight
        assert asyncio.get_running_loop().time() < deadline, "the burst was never admitted"
        await asyncio.sleep(0.005)
