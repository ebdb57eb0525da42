"""The load test's pure parts: workload mixes, ETTh1 windows, texts, the summary and pass/fail
rules, and the runner's locust command line. Locust itself is never imported here (it patches
the standard library through gevent); the runner is checked to keep it that way."""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys

import pytest

from loadtest import run
from loadtest.workload import (
    BACKENDS,
    TEST_ROWS,
    Samples,
    check,
    data_dir,
    format_table,
    load_ett_test,
    make_texts,
    parse_mix,
    percentile,
    pick,
    restrict_mix,
    summarise,
)
from tests.ops.helpers import REPO

ETTH1 = data_dir() / "ETT" / "ETTh1.csv"
CHANNELS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def test_parse_mix() -> None:
    assert parse_mix("all", BACKENDS, "backend") == dict.fromkeys(BACKENDS, 1.0)
    assert parse_mix("", BACKENDS, "backend") == dict.fromkeys(BACKENDS, 1.0)
    assert parse_mix("full:3, flash ,nystrom:0", BACKENDS, "backend") == {"full": 3.0, "flash": 1.0}
    with pytest.raises(ValueError, match="unknown backend 'fast'"):
        parse_mix("fast:1", BACKENDS, "backend")
    with pytest.raises(ValueError, match="no positive weight"):
        parse_mix("full:0", BACKENDS, "backend")
    with pytest.raises(ValueError, match="bad weight"):
        parse_mix("full:x", BACKENDS, "backend")


def test_pick_follows_the_weights() -> None:
    rng = random.Random(0)
    mix = restrict_mix({"full": 3.0, "flash": 1.0, "nystrom": 5.0}, ["full", "flash"])
    draws = [pick(rng, mix) for _ in range(4000)]
    assert set(draws) == {"full", "flash"}
    assert 0.70 < draws.count("full") / len(draws) < 0.80


def test_ett_test_split_windows() -> None:
    # ETTh1 ships in data/ETT/: a missing file is a broken checkout (or a wrong
    # ATTNSERVE_DATA_DIR), not a reason to skip.
    assert ETTH1.is_file(), (
        f"ETTh1 missing at {ETTH1}; it ships in data/ETT/ (check ATTNSERVE_DATA_DIR)"
    )
    table = load_ett_test()
    assert len(table) == TEST_ROWS[1] - TEST_ROWS[0]
    assert table.timestamps[0] == "2017-10-24 00:00:00"  # first test timestamp (ETT README)
    timestamps, values = table.random_window(random.Random(1), 96, CHANNELS)
    assert len(timestamps) == len(values) == 96
    assert all(len(row) == 7 for row in values)
    # The columns are taken by name, in the order the model asks for.
    _, reordered = table.window(0, 2, ["OT", "HUFL"])
    _, ordered = table.window(0, 2, CHANNELS)
    assert reordered[0] == [ordered[0][6], ordered[0][0]]
    with pytest.raises(ValueError):
        table.window(len(table) - 10, 11, CHANNELS)


def test_data_dir_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_DATA_DIR", "/somewhere/else")
    assert str(data_dir()) == "/somewhere/else"
    with pytest.raises(FileNotFoundError, match="ATTNSERVE_DATA_DIR"):
        load_ett_test()
    monkeypatch.delenv("ATTNSERVE_DATA_DIR")
    assert data_dir() == REPO / "data"


def test_texts_vary_in_count_and_length() -> None:
    rng = random.Random(0)
    batches = [make_texts(rng, 4) for _ in range(300)]
    assert {len(b) for b in batches} == {1, 2, 3, 4}
    words = [len(t.split()) for b in batches for t in b]
    assert min(words) < 15 and max(words) > 200  # short queries up to passages over 256 tokens


def test_percentile_and_summary() -> None:
    assert percentile([], 50) != percentile([], 50)  # NaN
    assert percentile([1, 2, 3, 4], 50) == 2  # nearest rank, as every benchmark table
    assert percentile([5.0], 99) == 5.0
    ok = Samples(client_ms=[10.0, 20.0, 30.0], queue_ms=[1.0], inference_ms=[5.0], batch_rows=[2.0])
    ok.statuses = {"200": 3}
    bad = Samples(client_ms=[100.0], failures=1, statuses={"200": 1, "429": 1})
    summary = summarise({"/encode [full]": ok, "/forecast [flash]": bad}, seconds=2.0)
    assert summary["total"]["requests"] == 5 and summary["total"]["failures"] == 1
    assert summary["total"]["statuses"] == {"200": 4, "429": 1}
    assert summary["by_name"]["/encode [full]"]["throughput_rps"] == 1.5
    table = format_table(summary)
    assert "/encode [full]" in table and "TOTAL" in table
    assert check(summary, None) == ["1 failed requests (statuses {'200': 4, '429': 1})"]
    ok_only = summarise({"/encode [full]": ok}, seconds=2.0)
    assert check(ok_only, max_p99_ms=100) == []
    assert check(ok_only, max_p99_ms=25)[0].startswith("/encode [full]: p99 30 ms > 25 ms")
    assert check(summarise({}, 1.0), None) == ["no request was made"]


def test_parse_duration() -> None:
    assert run.parse_duration("20s") == 20
    assert run.parse_duration("1h30m") == 5400
    assert run.parse_duration("45") == 45
    with pytest.raises(argparse.ArgumentTypeError):
        run.parse_duration("20 seconds")


def test_runner_passes_only_options_the_locustfile_declares(
    tmp_path: pytest.TempPathFactory,
) -> None:
    args = run.build_parser().parse_args(
        [
            "--users",
            "3",
            "--rps",
            "6",
            "--duration",
            "20s",
            "--forecast-models",
            "informer-etth1-h24",
        ]
    )
    command = run.locust_command(args, "http://127.0.0.1:1", tmp_path, 2.0)  # type: ignore[arg-type]
    ours = {a for a in command if a.startswith("--")}
    source = (REPO / "loadtest" / "locustfile.py").read_text(encoding="utf-8")
    declared = set(re.findall(r'add_argument\(\s*"(--[a-z-]+)"', source))
    locust_own = {
        "--headless", "--host", "--users", "--spawn-rate", "--run-time", "--stop-timeout",
        "--csv", "--html", "--only-summary", "--loglevel", "--exit-code-on-error",
    }  # fmt: skip
    assert ours - locust_own <= declared, (ours - locust_own) - declared
    assert command[command.index("--user-rate") + 1] == "2"
    assert command[command.index("--host") + 1] == "http://127.0.0.1:1"


def test_runner_never_imports_locust() -> None:
    code = (
        "import sys; import loadtest.run, loadtest.workload; "
        "bad = [m for m in ('locust', 'gevent') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_ci_script_is_bounded_and_local() -> None:
    script = (REPO / "loadtest" / "ci.sh").read_text(encoding="utf-8")
    assert "--start-server" in script and "--device cpu" in script
    seconds = run.parse_duration(re.search(r"--duration\s+(\S+)", script).group(1))  # type: ignore[union-attr]
    assert seconds <= 30
    assert "http://" not in script  # the server it loads is the one it started on 127.0.0.1
