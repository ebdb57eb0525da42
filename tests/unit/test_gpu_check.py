"""The GPU check (benchmarks/gpu_check): its report's shape, the grid and reference figures of its
attention step, its JUnit counts and the closure of the wheels it carries. The whole script runs
on CPU in CI as ``make gpu-check-dry``; these keep its parts honest without a server."""

from __future__ import annotations

import copy
import json
import tomllib
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from benchmarks.attention.gpu import kernel_row
from benchmarks.gpu_check import __main__ as runner
from benchmarks.gpu_check import kernels, published, report, wheels
from models.attention import BACKENDS

ROOT = Path(__file__).resolve().parents[2]


def full_report() -> dict:
    """A report with every step, as a dry run leaves it (placeholder rows, one load window)."""
    rows = [kernels.placeholder(*cell, "skipped: no CUDA") for cell in kernels.grid()]
    window = {
        "path": "/encode", "model": "random-bert", "attention": "flash", "clients": 4,
        "rps": 100.0, "p50_ms": 9.0, "p99_ms": 20.0, "mean_batch": 1.5, "max_batch": 3,
        "errors": {},
    }  # fmt: skip
    figures = {
        "install": {"wheels": ["a.whl"], "wheel_bytes": 2**20, "budget_bytes": 30 * 2**20},
        "environment": {"packages": {"torch": {"version": "2.11", "in_range": True}}},
        "tests": {"passed": 3, "failed": 1, "errors": 0, "skipped": 2,
                  "failures": [["t::x", "boom"]], "skip_reasons": {"no CUDA": 2}},
        "attention": {"device": "cpu", "rows": rows, "sources": published.SOURCES},
        "service": {"device": "cpu", "models": ["random-bert"], "windows": [window],
                    "metrics": {"batches run": 4.0}},
    }  # fmt: skip
    steps = {n: report.step_record(n, "ok", 1.0, 10.0, "", figures[n]) for n in report.STEPS}
    return {
        "mode": "dry run (CPU)", "command": "python -m benchmarks.gpu_check", "started": "now",
        "host": "here", "budget_s": 480.0, "total_s": 5.0, "steps": steps,
    }  # fmt: skip


def test_a_complete_report_has_its_shape_and_renders_every_section() -> None:
    full = full_report()
    assert report.problems(full) == []
    text = report.markdown(full)
    for name in report.STEPS:
        assert f"## {report.TITLES[name]}" in text
    every = text.split("### every backend")[1]
    assert f"| dtype | causal | D | L | {' | '.join(kernels.grid()[0][:1])}" in every
    assert all(f" {b} " in every.splitlines()[2] for b in BACKENDS)
    assert "skipped: no CUDA" in text


@pytest.mark.parametrize("name", report.STEPS)
def test_a_missing_step_or_figure_is_named(name: str) -> None:
    full = full_report()
    del full["steps"][name]
    assert report.problems(full) == [f"no step {name!r}"]
    full = full_report()
    key = report.FIGURE_KEYS[name][0]
    del full["steps"][name]["figures"][key]
    assert report.problems(full) == [f"{name}: no figure {key!r}"]


def test_step_records_fill_every_figure_key_and_failed_steps_are_named() -> None:
    record = report.step_record("service", "timed out after 150 s", 150.0, 150.0)
    assert set(record["figures"]) == set(report.FIGURE_KEYS["service"])
    full = full_report()
    full["steps"]["service"] = record
    full["steps"]["attention"]["status"] = "skipped: no CUDA"
    assert report.failed(full) == ["service"]
    broken = copy.deepcopy(full)
    broken["steps"]["tests"]["status"] = "failed"
    assert report.failed(broken) == ["tests", "service"]


def test_the_grid_covers_every_backend_and_paper_shape_flash_first() -> None:
    cells = kernels.grid()
    assert len(cells) == len(BACKENDS) * 2 * 2 * 2 * len(published.LENGTHS)
    assert {c[0] for c in cells} == set(BACKENDS)
    assert all(c[0] == "flash" for c in cells[: len(cells) // len(BACKENDS)])
    assert cells[len(cells) // len(BACKENDS)][0] == "full"


def test_published_figures_follow_the_papers_shapes_and_counts() -> None:
    assert published.fa2_shape(512, 64) == (32, 32)
    assert published.fa2_shape(16384, 128) == (1, 16)
    dense = published.forward_flops(32, 32, 512, 64, causal=False)
    assert dense == 4 * 32 * 32 * 512**2 * 64
    assert published.forward_flops(32, 32, 512, 64, causal=True) == dense / 2
    assert published.published(False, 128, 8192) == {
        "fa2_h100_fwd_bwd": 335, "fa2_a100_fwd_bwd": 201, "fa2_h100_fwd": 370,
    }  # fmt: skip
    assert published.published(False, 128, 512)["fa2_a100_fwd_bwd"] is None  # behind the legend
    assert published.published(True, 64, 100) == dict.fromkeys(published.SOURCES)
    for figure in (published.FA2_H100_FWD_BWD, published.FA2_A100_FWD_BWD, published.FA2_H100_FWD):
        assert set(figure) == {(c, d) for c in (False, True) for d in (64, 128)}
        assert all(len(bars) == len(published.LENGTHS) for bars in figure.values())


def test_a_kernel_row_measures_on_cpu_and_says_why_when_it_cannot() -> None:
    cpu = torch.device("cpu")
    row = kernel_row("flash", 64, 64, True, torch.float32, cpu, 1, 0.0, True, tokens=64)
    assert row["status"] == "ok" and (row["batch"], row["heads"]) == (1, 32)
    assert row["fwd_tflops"] > 0 and row["fwd_bwd_tflops"] > 0
    assert row["published"] == dict.fromkeys(published.SOURCES)  # no bar at L=64
    over = kernel_row("full", 64, 512, False, torch.float32, cpu, full_budget_gib=1e-6)
    assert over["status"].startswith("skipped: scores over") and over["fwd_ms"] is None
    refused = kernel_row("no-such-backend", 64, 64, False, torch.float32, cpu, tokens=64)
    assert refused["status"].startswith("refused: unknown attention backend")


def test_a_backend_that_raises_is_an_error_row_not_the_end_of_the_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("dtype mismatch")

    monkeypatch.setattr("benchmarks.attention.gpu.attend", broken)
    row = kernel_row("performer", 64, 64, False, torch.float32, torch.device("cpu"), tokens=64)
    assert row["status"] == "error: ValueError: dtype mismatch" and row["fwd_ms"] is None


def test_a_dry_grid_is_all_placeholders_in_the_measured_shape(tmp_path: Path) -> None:
    result = tmp_path / "attention.json"
    kernels.run(1.0, dry=True, result=result)
    data = json.loads(result.read_text())
    assert data["status"] == "skipped: no CUDA"
    assert len(data["figures"]["rows"]) == len(kernels.grid())
    measured = kernel_row("flash", 64, 64, False, torch.float32, torch.device("cpu"), 1, 0.0)
    assert set(data["figures"]["rows"][0]) == set(measured)


def test_junit_counts_outcomes_failures_and_skip_reasons(tmp_path: Path) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.gpu.a" name="ok"/>'
        '<testcase classname="tests.gpu.a" name="bad"><failure message="assert 1 == 2">'
        "long</failure></testcase>"
        '<testcase classname="tests.gpu.b" name="err"><error message="ImportError: x"/></testcase>'
        '<testcase classname="tests.gpu.c" name="s1"><skipped message="needs a CUDA device"/>'
        "</testcase>"
        '<testcase classname="tests.gpu.c" name="s2"><skipped message="needs a CUDA device"/>'
        "</testcase></testsuite></testsuites>"
    )
    got = runner.junit(xml)
    assert (got["passed"], got["failed"], got["errors"], got["skipped"]) == (1, 1, 1, 2)
    assert got["failures"] == [
        ("tests.gpu.a::bad", "assert 1 == 2"),
        ("tests.gpu.b::err", "ImportError: x"),
    ]
    assert got["skip_reasons"] == {"needs a CUDA device": 2}


def test_every_dependency_is_carried_on_the_machine_or_left_out_with_a_reason() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    carried = {wheels.normal(n) for n in (*wheels.ROOTS, *wheels.ALWAYS)}
    for text in deps:
        name = wheels.normal(Requirement(text).name)
        assert name in carried | wheels.TARGET_HAS | set(wheels.NOT_CARRIED), name


def test_the_pins_lie_in_pyprojects_ranges() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = {wheels.normal(Requirement(t).name): Requirement(t).specifier for t in deps}
    for pin in wheels.pins():
        name, version = pin.split("==")
        assert SpecifierSet(str(ranges.get(wheels.normal(name), ""))).contains(version), pin


def _wheel(folder: Path, name: str, requires: list[str]) -> Path:
    path = folder / f"{name}-1.0-py3-none-any.whl"
    lines = [f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA", "\n".join(lines) + "\n")
    return path


def test_a_requirement_neither_carried_nor_on_the_machine_is_unmet(tmp_path: Path) -> None:
    web = _wheel(
        tmp_path,
        "webby",
        ["anyio>=4", "helper_lib", "colorama; sys_platform == 'win32'", "extra_x; extra == 'x'"],
    )
    assert wheels.unmet([web]) == ["webby needs helper-lib"]
    assert wheels.unmet([web, _wheel(tmp_path, "helper_lib", [])]) == []


def test_the_wheel_budget_is_what_the_tree_leaves_of_64_mib() -> None:
    tree = wheels.travel_bytes()
    assert tree is not None and 0 < tree < wheels.TRAVEL_LIMIT
    assert wheels.budget() == wheels.TRAVEL_LIMIT - tree
