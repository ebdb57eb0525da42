"""The benchmark harness's report writer, argparse parents with ``--smoke`` and alternating
rounds (the load driver and percentiles: test_peer_driver.py)."""

from __future__ import annotations

import pytest

from benchmarks.harness import cli, report, timing


@pytest.fixture(autouse=True)
def _smoke_off():
    yield
    report.smoke_mode(False)


def test_table_aligns_columns_and_writes_cells_as_given() -> None:
    assert report.table(["a", "b"], [[1, "x"], [2.5, ""]], "lr") == (
        "| a | b |\n|---|---:|\n| 1 | x |\n| 2.5 |  |"
    )


def test_smoke_overrides_options_and_redirects_results(tmp_path) -> None:
    p = cli.parser("doc", cli.repeats(5), cli.out(report.RESULTS / "x.md"))
    args = cli.parse(p, [], repeats=1)
    assert (args.repeats, args.smoke) == (5, False)
    assert report.destination(args.out) == report.RESULTS / "x.md"
    args = cli.parse(p, ["--smoke"], repeats=1)
    assert args.repeats == 1
    assert report.destination(args.out) == report.SMOKE_RESULTS / "x.md"
    outside = tmp_path / "y.md"
    assert report.destination(outside) == outside  # only results/ is protected


def test_smoke_values_must_name_real_options() -> None:
    with pytest.raises(ValueError, match="lengths"):
        cli.parse(cli.parser("doc", cli.repeats(5)), ["--smoke"], lengths=[64])


def test_report_header_names_the_command(tmp_path) -> None:
    r = report.Report("benchmarks.x", ["--a", "b c"])
    text = r.add("para").text("Title")
    assert text.startswith("# Title\n\nCommand: `python -m benchmarks.x --a 'b c'`;")
    assert "load average before" in text and text.endswith("para\n")
    r.write(tmp_path / "out.md", data={"k": 1})
    assert (tmp_path / "out.json").read_text() == '{\n  "k": 1\n}\n'


def test_alternating_runs_variants_in_turn_after_a_warm_up_round() -> None:
    calls: list[str] = []
    got = timing.alternating({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 2)
    assert calls == ["a", "b"] * 3
    assert [len(t.wall) for t in got.values()] == [2, 2]


DRIVER = """
import sys, time
from pathlib import Path
from benchmarks.harness.process import ServerProcess, free_port
server = ServerProcess(
    [sys.executable, "-c", "import time; time.sleep(600)"], Path(sys.argv[1]), free_port()
)
print(server.proc.pid, flush=True)
try:
    time.sleep(600)
finally:
    server.stop(grace=1.0)
"""


def test_a_benchmark_ended_by_sigterm_stops_its_server(tmp_path) -> None:
    """``kill`` of a benchmark runs the ``finally`` that stops its server: the server, in its
    own session, would otherwise keep running into the next measurement."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    env = {**os.environ, "PYTHONPATH": str(report.RESULTS.parents[1])}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert driver.stdout is not None
    server_pid = int(driver.stdout.readline())
    assert psutil.pid_exists(server_pid)
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while psutil.pid_exists(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(server_pid) or psutil.Process(server_pid).status() == "zombie"


def test_the_command_writes_paths_in_the_checkout_relative_to_it() -> None:
    root = report.RESULTS.parents[1]
    line = report.command("benchmarks.x", ["--output-prefix", f"{root}/benchmarks/results/x"])
    assert line == "python -m benchmarks.x --output-prefix benchmarks/results/x"
