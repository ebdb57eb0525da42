"""``--workers 2``: two server processes on one port under a supervisor, end to end over HTTP with
the real all-MiniLM-L6-v2 and a tiny Informer; plus the supervisor's settings arithmetic. The
SIGTERM test runs last in the module: it stops the shared server."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from pydantic import ValidationError

from service.runtime.auto_workers import auto_workers
from service.runtime.workers import worker_settings
from service.settings import Settings
from tests.service.conftest import metric
from tests.service.helpers import hourly_series, tiny_checkpoint
from tests.service.server_process import ServerProcess, long_text_burst, wait_until_admitted

MODEL = "informer-tiny-workers"
TEXT = "all-MiniLM-L6-v2"
MAX_BATCH = 4


def worker_pids(server: ServerProcess) -> set[int]:
    """The supervisor's live worker processes (not multiprocessing's resource tracker, not a
    killed worker not yet reaped)."""
    pids = set()
    for child in psutil.Process(server.proc.pid).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                pids.add(child.pid)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            pass
    return pids


def wait_for_log(server: ServerProcess, text: str, count: int = 1, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while server.log_path.read_text().count(text) < count:
        assert time.monotonic() < deadline, server.log_path.read_text()
        time.sleep(0.1)


def forecast_body(i: int) -> dict[str, object]:
    return {"model": MODEL, "series": [hourly_series(30, seed=i)]}


async def forecasts(url: str, n: int, connections: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        return list(
            await asyncio.gather(*(c.post("/forecast", json=forecast_body(i)) for i in range(n)))
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("workers")
    ckpt = tiny_checkpoint(tmp / MODEL)
    args = ["--workers", "2", "--max-batch-size", str(MAX_BATCH), "--shutdown-grace-s", "60"]
    s = ServerProcess(tmp / "server.log", [TEXT, str(ckpt)], args)
    try:
        s.wait_ready()
        wait_for_log(s, "attnserve: ready in", count=2)  # /readyz came from one of the two
        yield s
    finally:
        s.stop()
        for pid in worker_pids(s) if s.proc.poll() is None else ():
            psutil.Process(pid).kill()


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_both_workers_serve_and_metrics_add_up_across_them(server: ServerProcess) -> None:
    assert len(worker_pids(server)) == 2
    before = metric(
        httpx.get(server.url + "/metrics").text, "attnserve_requests_total", endpoint="/forecast"
    )
    responses = asyncio.run(forecasts(server.url, 64, connections=16))
    assert [r.status_code for r in responses] == [200] * 64
    # Request ids are "<per-process prefix>-<counter>": two prefixes, two processes answered.
    prefixes = {r.headers["x-request-id"].rsplit("-", 1)[0] for r in responses}
    assert len(prefixes) == 2
    # Whichever worker answers the scrape counts every worker's requests.
    for _ in range(4):
        scrape = httpx.get(server.url + "/metrics").text
        assert metric(scrape, "attnserve_requests_total", endpoint="/forecast") - before == 64
        assert metric(scrape, "attnserve_ready") == 1


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_a_killed_worker_is_replaced_and_serving_goes_on(server: ServerProcess) -> None:
    old = worker_pids(server)
    victim = min(old)
    psutil.Process(victim).kill()
    wait_for_log(server, f"worker {victim} ended (status -9); starting another")
    # The line is logged just before the replacement is spawned: wait for its process.
    deadline = time.monotonic() + 60
    while len(pids := worker_pids(server)) != 2 or len(pids - old) != 1:
        assert time.monotonic() < deadline, (old, pids)
        time.sleep(0.1)
    (replacement,) = pids - old
    wait_for_log(server, f"[{replacement}] attnserve: ready in")
    assert worker_pids(server) == (old - {victim}) | {replacement}
    responses = asyncio.run(forecasts(server.url, 16, connections=8))
    assert [r.status_code for r in responses] == [200] * 16


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_sigterm_drains_every_worker_and_loses_no_accepted_request(server: ServerProcess) -> None:
    n = 40
    pids = worker_pids(server)

    async def scenario() -> tuple[list[int], float, int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            before = metric(
                (await c.get("/metrics")).text, "attnserve_requests_total", endpoint="/encode"
            )
            limits = httpx.Limits(max_connections=n)
            async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as burst:
                tasks = long_text_burst(burst, n)  # admitted by one worker or the other
                in_flight = await wait_until_admitted(c, n, before)
                server.proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.1)
                # On a new connection: ``c`` is kept alive by one worker, and a worker that has
                # answered all it admitted closes its idle connections as it exits; a request
                # sent on ``c`` just then meets that close instead of the other worker's 503.
                async with httpx.AsyncClient(base_url=server.url, timeout=120) as fresh:
                    late = await fresh.post("/encode", json={"inputs": ["arrived after SIGTERM"]})
                statuses = [r.status_code for r in await asyncio.gather(*tasks)]
            return statuses, in_flight, late.status_code

    statuses, in_flight, late = asyncio.run(scenario())
    assert in_flight > 2 * MAX_BATCH  # SIGTERM arrived with requests queued in the workers
    assert statuses == [200] * n
    assert late == 503
    assert server.proc.wait(90) == 0
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)
    assert server.log_path.read_text().count("drained: every admitted request was answered") == 2


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_a_worker_whose_start_up_fails_stops_the_server_with_status_1(tmp_path: Path) -> None:
    s = ServerProcess(tmp_path / "server.log", ["informer-etth1-h999"], ["--workers", "2"])
    try:
        assert s.proc.wait(120) == 1
    finally:
        s.stop()
    log = s.log_path.read_text()
    assert "no Informer checkpoint 'informer-etth1-h999'" in log
    assert re.search(r"worker \d+ exited with status [13]; stopping", log)  # 3: uvicorn's


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop_all(server: ServerProcess, pids: set[int]) -> None:
    """Stop the supervisor, then kill any of its workers (``pids``) still running."""
    server.stop()
    for pid in pids:
        if not gone(pid):
            psutil.Process(pid).kill()


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_workers_drain_and_exit_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    ckpt = tiny_checkpoint(tmp_path / MODEL)
    s = ServerProcess(tmp_path / "server.log", [str(ckpt)], ["--workers", "2"])
    pids: set[int] = set()
    try:
        s.wait_ready()
        wait_for_log(s, "attnserve: ready in", count=2)
        pids = worker_pids(s)
        assert len(pids) == 2
        s.proc.kill()  # no chance to forward anything
        deadline = time.monotonic() + 60
        while not all(gone(p) for p in pids):
            assert time.monotonic() < deadline, s.log_path.read_text()
            time.sleep(0.1)
        wait_for_log(s, f"the supervisor (pid {s.proc.pid}) is gone", count=2)
    finally:
        stop_all(s, pids)


def test_torch_threads_are_shared_out_among_workers() -> None:
    assert worker_settings(Settings(workers=2), cpus=8, environ={}).torch_threads == 4
    assert worker_settings(Settings(workers=4), cpus=2, environ={}).torch_threads == 1
    three = Settings(workers=4, torch_threads=3)
    assert worker_settings(three, cpus=2, environ={}).torch_threads == 3
    assert worker_settings(Settings(workers=3), cpus=8, environ={}).workers == 3  # budget divisor


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_workers_auto_starts_what_the_host_allows_and_logs_why(tmp_path: Path) -> None:
    ckpt = tiny_checkpoint(tmp_path / MODEL)
    # ServerProcess runs one torch thread a process; this host's choice for that, worked out here.
    expected = auto_workers(
        Settings(workers=0, torch_threads=1, device="cpu", models=(str(ckpt),))
    ).workers
    s = ServerProcess(tmp_path / "server.log", [str(ckpt)], ["--workers", "auto"])
    pids: set[int] = set()
    try:
        s.wait_ready()
        if expected > 1:
            wait_for_log(s, "attnserve: ready in", count=expected)
            pids = worker_pids(s)
            assert len(pids) == expected
            line = f"supervisor {s.proc.pid}: {expected} workers, 1 torch threads each (auto: "
        else:
            line = "workers: 1 (auto: "
        log = s.log_path.read_text()
        assert line in log and "usable CPUs, 1 torch thread(s) a process (torch_threads)" in log
    finally:
        stop_all(s, pids)


def test_several_workers_on_cuda_are_refused_with_the_fix() -> None:
    with pytest.raises(ValidationError, match="on CUDA use --workers 1"):
        Settings(workers=2, device="cuda")
