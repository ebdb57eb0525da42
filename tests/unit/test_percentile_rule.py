"""One percentile rule for every latency figure: nearest rank (:func:`benchmarks.harness.timing.
percentile`), numpy's ``inverted_cdf`` method, used by the harness and the slow-sockets attack's
probe summary, the load test and the large-body probe alike."""

from __future__ import annotations

import random

import numpy as np
import pytest

from benchmarks.harness.timing import percentile
from benchmarks.service.attacks_slow_sockets import Probes


@pytest.mark.parametrize("n", [1, 2, 3, 10, 99, 100, 101, 150, 1000])
def test_nearest_rank_is_numpys_inverted_cdf_in_both_places(n: int) -> None:
    rng = random.Random(n)
    values = [rng.uniform(0.0, 50.0) for _ in range(n)]
    for q in (1, 50, 90, 95, 99, 99.9, 100):
        want = float(np.percentile(values, q, method="inverted_cdf"))
        assert percentile(values, q) == want, (n, q)
    assert Probes(latencies_ms=values).summary()["p99_ms"] == float(
        np.percentile(values, 99, method="inverted_cdf")
    )


def test_the_load_test_and_the_large_body_probe_use_the_same_rule() -> None:
    from loadtest.workload import Samples, summarise
    from tests.utils.large_bodies import Large, Observed

    rng = random.Random(7)
    values = [rng.uniform(0.0, 50.0) for _ in range(37)]
    want = {q: float(np.percentile(values, q, method="inverted_cdf")) for q in (50, 95, 99)}
    load = Samples(client_ms=values, queue_ms=values, inference_ms=values, batch_rows=[1.0])
    load.statuses = {"200": len(values)}
    row = summarise({"/encode [flash]": load}, seconds=1.0)["by_name"]["/encode [flash]"]
    assert row["client_ms"] == {f"p{q}": v for q, v in want.items()}
    large = Large(path="/embed", label="largest", body=b"{}")
    seen = Observed(large, health_ms=values, encode_ms=values)
    assert seen.row()["health_p99"] == want[99]
