"""The capacity figures of the benchmarks: Little's-law rate, busy cores, the ratio table, and the
forecast trade's capacity summary against its target."""

from __future__ import annotations

import math
from collections import Counter

from benchmarks.forecast.trade_report import capacity_summary
from benchmarks.harness.capacity import Capacity, closed_loop_rate, ratio_table
from benchmarks.harness.load import LoadResult


def window(latency_ms: float, answers: int, seconds: float, server_cpu: float) -> LoadResult:
    """A window of ``answers`` answers of ``latency_ms`` each, the server busy ``server_cpu`` s."""
    cpu = {"server": server_cpu, "driver": 0.01 * answers}
    return LoadResult(answers, seconds, [latency_ms] * answers, Counter(), cpu, [])


def capacity(one_ms: float, many_ms: float, cores_one: float) -> Capacity:
    """8 clients: one client at ``one_ms``, eight at ``many_ms`` each, over 10 s windows."""
    cap = Capacity(8)
    cap.one.add(window(one_ms, 5, 10.0, cores_one * 10.0))
    cap.many.add(window(many_ms, 16, 10.0, 19.0))
    return cap


def test_closed_loop_rate_is_clients_over_mean_latency() -> None:
    # 8 clients each waiting 2 s per answer: 4 answers a second, however they bunch up.
    result = LoadResult(3, 10.0, [1000.0, 2000.0, 3000.0])
    assert closed_loop_rate(result, 8) == 4.0
    assert math.isnan(closed_loop_rate(LoadResult(0, 10.0, []), 8))


def test_capacity_pools_rounds_and_reads_busy_cores() -> None:
    cap = capacity(100.0, 400.0, 1.9)
    cap.many.add(window(400.0, 16, 10.0, 19.0))  # a second round
    record = cap.record()
    assert record["p50_ms_1_client"] == 100.0
    assert record["requests_per_s"] == 20.0  # 8 / 0.4 s
    assert math.isclose(record["server_cores_1_client"], 1.9)
    assert math.isclose(record["server_cores_many"], 1.9)
    assert math.isclose(record["driver_cpu_ms_per_request"], 10.0)
    assert record["answers_many"] == 32


def test_ratio_table_sets_each_row_against_its_baseline() -> None:
    flash = capacity(100.0, 800.0, 1.9)  # 10 req/s at 8 clients
    fast = capacity(60.0, 320.0, 1.0)  # 25 req/s: 2.5x flash, though only 1.67x alone
    text = ratio_table(
        [(("flash", "2048"), flash, flash), (("nystrom", "2048"), fast, flash)], ["b", "n"]
    )
    lines = text.splitlines()
    assert "req/s @8 clients" in lines[0] and "× flash @8" in lines[0]
    assert "| nystrom | 2048 | 60 | 1.67x | 1.00 | 25.00 | **2.50x** |" in lines[3]


def test_capacity_summary_names_the_best_within_the_mse_budget_against_the_target() -> None:
    def row(backend: str, rate: float, p50: float, mse: float, approximate: bool = True) -> dict:
        return {
            "model": "m", "backend": backend, "ran": backend, "approximate": approximate,
            "requests_per_s_8_clients": rate, "p50_ms_1_client": p50, "test_mse": mse,
            "linear_mse": 1.0, "server_cores_1_client": 1.0,
        }  # fmt: skip

    rows = [
        row("flash", 34.0, 30.0, 0.35, approximate=False),
        row("performer", 76.0, 16.0, 0.35),
        row("probsparse", 90.0, 14.0, 0.50),  # faster, but 43 % worse: out of the budget
    ]
    (line,) = capacity_summary(rows, {"m": "performer"})
    assert "**performer**" in line and "**2.24x**" in line and "2x: met" in line
    rows[1]["requests_per_s_8_clients"] = 60.0
    (line,) = capacity_summary(rows, {"m": "performer"})
    assert "**1.76x**" in line and "2x: not met" in line
