"""``workers`` auto: the choice as a pure function, the host readings it takes, the settings and
CLI spelling, and what ``attnserve serve`` starts with it (a supervisor or one server)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.cli import build_parser, main
from service.runtime import auto_workers as aw
from service.runtime.auto_workers import (
    FIT_FRACTION,
    GIB,
    MAX_AUTO_WORKERS,
    RUNTIME_BYTES,
    UNKNOWN_MODEL_BYTES,
    WorkerChoice,
    choose_workers,
    gpu_visible,
    omp_num_threads,
    process_bytes,
)
from service.runtime.workers import worker_settings
from service.settings import Settings

PLENTY = 64 * GIB


@pytest.mark.parametrize(
    ("setting", "kwargs", "workers", "why"),
    [
        (3, {"cpus": 8}, 3, "set explicitly"),
        (1, {"cpus": 8}, 1, "set explicitly"),
        (5, {"cpus": 2, "available_bytes": 0}, 5, "set explicitly"),  # explicit beats memory
        (0, {"cpus": 4, "available_bytes": PLENTY}, 4, "4 usable CPUs"),
        (0, {"cpus": 1, "available_bytes": PLENTY}, 1, "1 usable CPUs"),
        (0, {"cpus": 8, "torch_threads": 2, "available_bytes": PLENTY}, 4, "2 torch thread"),
        (0, {"cpus": 2, "torch_threads": 4, "available_bytes": PLENTY}, 1, "4 torch thread"),
        (0, {"cpus": 4}, 4, "4 usable CPUs"),  # memory unknown: no cap
        # One process needs 1 GiB; half of 3 GiB holds one, half of 5 GiB two, of 64 GiB all.
        (0, {"cpus": 4, "process_bytes": GIB, "available_bytes": 3 * GIB}, 1, "1 fit"),
        (0, {"cpus": 4, "process_bytes": GIB, "available_bytes": 5 * GIB}, 2, "2 fit"),
        (0, {"cpus": 4, "process_bytes": GIB, "available_bytes": PLENTY}, 4, "4 fit"),
        (0, {"cpus": 4, "process_bytes": GIB, "available_bytes": GIB}, 1, "0 fit"),  # at least 1
        (0, {"cpus": 8, "device": "cuda", "available_bytes": PLENTY}, 1, "GPU"),
        (0, {"cpus": 8, "gpu": True, "available_bytes": PLENTY}, 1, "GPU"),  # device auto
        (0, {"cpus": 8, "gpu": True, "device": "cpu", "available_bytes": PLENTY}, 8, "CPUs"),
        (0, {"cpus": 8, "ray": True, "available_bytes": PLENTY}, 1, "Ray Serve"),
        # Past MAX_AUTO_WORKERS (8) CPUs: at most 8 processes, several threads each.
        (0, {"cpus": 16, "available_bytes": PLENTY}, 8, "2 torch thread(s) a process (auto)"),
        (0, {"cpus": 12, "available_bytes": PLENTY}, 6, "2 torch thread(s) a process (auto)"),
        (0, {"cpus": 9, "available_bytes": PLENTY}, 4, "2 torch thread(s) a process (auto)"),
        (0, {"cpus": 64, "available_bytes": PLENTY}, 8, "8 torch thread(s) a process (auto)"),
        (0, {"cpus": 8, "available_bytes": PLENTY}, 8, "1 torch thread(s) a process (auto)"),
        # OMP_NUM_THREADS is each process's team: CPUs // t processes, capped.
        (0, {"cpus": 16, "omp_threads": 1, "available_bytes": PLENTY}, 8, "(OMP_NUM_THREADS)"),
        (0, {"cpus": 16, "omp_threads": 2, "available_bytes": PLENTY}, 8, "(OMP_NUM_THREADS)"),
        (0, {"cpus": 16, "omp_threads": 4, "available_bytes": PLENTY}, 4, "(OMP_NUM_THREADS)"),
        (0, {"cpus": 2, "omp_threads": 1, "available_bytes": PLENTY}, 2, "(OMP_NUM_THREADS)"),
        (0, {"cpus": 2, "omp_threads": 4, "available_bytes": PLENTY}, 1, "(OMP_NUM_THREADS)"),
        # torch_threads, the server's own setting, wins over the environment.
        (0, {"cpus": 16, "torch_threads": 8, "omp_threads": 1}, 2, "(torch_threads)"),
        # Explicit counts are not capped (up to the setting's own bound).
        (12, {"cpus": 64}, 12, "set explicitly"),
    ],
)
def test_the_automatic_choice(
    setting: int, kwargs: dict[str, object], workers: int, why: str
) -> None:
    choice = choose_workers(setting, **kwargs)  # type: ignore[arg-type]
    assert choice.workers == workers
    assert why in choice.reason
    assert str(choice).startswith(f"workers: {workers} (")


def test_the_memory_rule_is_the_fit_fraction_of_what_is_available() -> None:
    # Exactly at the edge: n processes of ``p`` bytes fit when n * p <= FIT_FRACTION * available.
    p = GIB
    edge = int(3 * p / FIT_FRACTION)
    assert choose_workers(0, cpus=8, process_bytes=p, available_bytes=edge).workers == 3
    assert choose_workers(0, cpus=8, process_bytes=p, available_bytes=edge - 2).workers == 2


def test_omp_num_threads_is_a_team_size() -> None:
    assert omp_num_threads({}) is None
    assert omp_num_threads({"OMP_NUM_THREADS": "2"}) == 2
    assert omp_num_threads({"OMP_NUM_THREADS": "3,1"}) == 3  # nested levels: the outer one
    assert omp_num_threads({"OMP_NUM_THREADS": " 16 "}) == 16  # not capped here: a team size
    assert omp_num_threads({"OMP_NUM_THREADS": "0"}) is None
    assert omp_num_threads({"OMP_NUM_THREADS": "lots"}) is None


@pytest.mark.parametrize("cpus", [1, 2, 3, 4, 7, 8, 9, 12, 16, 24, 32, 48, 64, 96, 128, 256])
def test_every_host_size_gets_a_capped_count_that_fills_its_cpus(cpus: int) -> None:
    workers = choose_workers(0, cpus=cpus, available_bytes=PLENTY).workers
    threads = worker_settings(Settings(workers=workers), cpus=cpus, environ={}).torch_threads
    assert 1 <= workers <= MAX_AUTO_WORKERS
    assert workers * threads <= cpus  # never oversubscribed
    # Idle CPUs only where the count does not divide: fewer than one thread per worker.
    assert cpus - workers * threads < workers
    if cpus <= MAX_AUTO_WORKERS:
        assert (workers, threads) == (cpus, 1)  # small hosts: one thread a process, as measured


def test_the_automatic_cap_is_one_the_explicit_setting_accepts() -> None:
    bound = next(m.le for m in Settings.model_fields["workers"].metadata if hasattr(m, "le"))
    assert bound >= MAX_AUTO_WORKERS
    Settings(workers=MAX_AUTO_WORKERS)  # and it validates


@pytest.mark.parametrize(("omp", "workers", "threads"), [("1", 8, 1), ("2", 8, 2), ("4", 4, 4)])
def test_omp_num_threads_gives_each_worker_its_team_on_16_cpus(
    started: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
    omp: str,
    workers: int,
    threads: int,
) -> None:
    monkeypatch.setattr(aw, "available_cpus", lambda: 16)
    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert main(["serve", "--device", "cpu"]) == 0
    settings = started["supervisor"]
    assert isinstance(settings, Settings) and settings.workers == workers
    assert worker_settings(settings, cpus=16).torch_threads == threads


def test_a_gpu_is_seen_from_device_nodes_unless_hidden(tmp_path: Path) -> None:
    assert not gpu_visible(tmp_path, {})
    (tmp_path / "nvidiactl").touch()  # the control node alone is no GPU
    assert not gpu_visible(tmp_path, {})
    (tmp_path / "nvidia0").touch()
    assert gpu_visible(tmp_path, {})
    assert gpu_visible(tmp_path, {"CUDA_VISIBLE_DEVICES": "0"})
    assert not gpu_visible(tmp_path, {"CUDA_VISIBLE_DEVICES": ""})
    assert not gpu_visible(tmp_path, {"CUDA_VISIBLE_DEVICES": "-1"})
    rocm = tmp_path / "rocm"
    rocm.mkdir()
    (rocm / "kfd").touch()
    assert gpu_visible(rocm, {})


def test_a_process_holds_the_runtime_and_its_weight_files_once_per_precision(
    tmp_path: Path,
) -> None:
    model = tmp_path / "solar"
    (model / "sub").mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"x" * 3000)
    (model / "sub" / "tokenizer.json").write_bytes(b"x" * 1000)
    shelf = tmp_path / "shelf"
    (shelf / "a").mkdir(parents=True)
    (shelf / "a" / "w.bin").write_bytes(b"x" * 500)
    (shelf / "loose.txt").write_bytes(b"x" * 10_000)  # a file beside the folders: not a model
    assert process_bytes([str(model)], None, 1) == RUNTIME_BYTES + 4000
    assert process_bytes([str(model)], None, 2) == RUNTIME_BYTES + 8000
    assert process_bytes([str(model)], shelf, 1) == RUNTIME_BYTES + 4500
    assert process_bytes(["no-such-model"], None, 1) == RUNTIME_BYTES + UNKNOWN_MODEL_BYTES


def test_the_shipped_models_are_found_and_minilm_dominates() -> None:
    shipped = process_bytes(["informer-etth1-h24"], None, 1) - RUNTIME_BYTES
    assert 0 < shipped < 16 * 2**20  # a few hundred KB on disk
    text = process_bytes(["all-MiniLM-L6-v2"], None, 1) - RUNTIME_BYTES
    assert 50 * 2**20 < text < 200 * 2**20  # ~90 MB of float32 weights, not the unknown GiB


# ----------------------------------------------------------------------------- settings, CLI


@pytest.mark.parametrize(("value", "workers"), [("auto", 0), ("AUTO", 0), ("0", 0), ("3", 3)])
def test_settings_take_auto_or_a_number(value: str, workers: int) -> None:
    assert Settings(workers=value).workers == workers  # type: ignore[arg-type]


def test_the_default_is_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNSERVE_WORKERS", raising=False)
    assert Settings().workers == 0
    monkeypatch.setenv("ATTNSERVE_WORKERS", "auto")
    assert Settings().workers == 0


@pytest.mark.parametrize("bad", ["-1", "65", "several"])
def test_settings_refuse_other_spellings(bad: str) -> None:
    with pytest.raises(ValidationError):
        Settings(workers=bad)  # type: ignore[arg-type]


def test_the_flag_says_auto_and_takes_it(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    flag = capsys.readouterr().out.split("\n  --workers VALUE", 1)[1].split("--ray")[0]
    assert "0 or auto: one per usable CPU" in " ".join(flag.split())
    assert parser.parse_args(["serve", "--workers", "auto"]).workers == "auto"


def test_workers_keep_their_count_so_the_memory_budget_is_split() -> None:
    # app.py divides the default batch budget by settings.workers in every worker process.
    assert worker_settings(Settings(workers=3), cpus=6).workers == 3
    with pytest.raises(AssertionError, match="resolve workers auto"):
        worker_settings(Settings(workers=0), cpus=6)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """What ``attnserve serve`` started: the settings the one server or the supervisor got,
    and the supervisor's choice (neither runs)."""
    seen: dict[str, object] = {}

    def serve(settings: Settings) -> int:
        seen["server"] = settings
        return 0

    def supervise(self: object, settings: Settings, choice: WorkerChoice) -> None:
        seen["supervisor"], seen["choice"] = settings, choice

    import service.runtime.server
    import service.runtime.workers

    monkeypatch.setattr(service.runtime.server, "serve", serve)
    monkeypatch.setattr(service.runtime.workers.Supervisor, "__init__", supervise)
    monkeypatch.setattr(service.runtime.workers.Supervisor, "run", lambda self: 0)
    monkeypatch.setattr(aw, "available_host_memory", lambda: PLENTY)
    monkeypatch.setattr(aw, "gpu_visible", lambda: False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("ATTNSERVE_WORKERS", raising=False)
    return seen


def test_serve_starts_one_process_per_cpu_by_default(
    started: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aw, "available_cpus", lambda: 3)
    assert main(["serve", "--device", "cpu"]) == 0
    settings, choice = started["supervisor"], started["choice"]
    assert isinstance(settings, Settings) and settings.workers == 3
    assert isinstance(choice, WorkerChoice) and "auto: 3 usable CPUs" in choice.reason
    assert "server" not in started


def test_serve_on_one_cpu_or_with_explicit_workers_runs_one_server_and_says_why(
    started: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(aw, "available_cpus", lambda: 1)
    with caplog.at_level(logging.INFO, logger="attnserve"):
        assert main(["serve", "--device", "cpu"]) == 0
    server = started["server"]
    assert isinstance(server, Settings) and server.workers == 1
    assert "workers: 1 (auto: 1 usable CPUs" in caplog.text
    monkeypatch.setattr(aw, "available_cpus", lambda: 4)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnserve"):
        assert main(["serve", "--workers", "1"]) == 0
    assert "workers: 1 (set explicitly)" in caplog.text
    assert "supervisor" not in started
