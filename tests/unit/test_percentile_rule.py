"""One percentile rule for the benchmarks: nearest rank (:func:`benchmarks.harness.timing.
percentile`), numpy's ``inverted_cdf`` method, used by the harness and the slow-sockets attack's
probe summary alike."""

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
