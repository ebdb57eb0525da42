"""The request workloads the service benchmarks share: short texts and ETTh1 test windows, and
one request per item of them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from benchmarks.harness.load import HOST, build_request


def short_texts(n: int) -> list[str]:
    """``n`` texts of 8 to 24 words."""
    from models.text.quality.corpus import word_windows

    pool = word_windows(n, 24)
    return [" ".join(t.split()[: 8 + (i * 7) % 17]) for i, t in enumerate(pool)]


def etth1_windows(context: int, n: int) -> list[dict[str, Any]]:
    """``n`` test-split histories of ``context`` rows (as request ``series`` items)."""
    from models.training.data.ett import SPLIT_BORDERS, load_etth1

    index, values = load_etth1()
    start, end = SPLIT_BORDERS["test"]
    stride = max(1, (end - start - context) // n)
    out = []
    for k in range(n):
        lo = start - context + k * stride
        out.append(
            {
                "timestamps": [t.strftime("%Y-%m-%d %H:%M:%S") for t in index[lo : lo + context]],
                "values": values[lo : lo + context].round(3).tolist(),
            }
        )
    return out


@dataclass
class Workload:
    """Request bodies (JSON) for one task and backend, posted to ``path``; ``label`` names it in
    progress lines."""

    path: str
    bodies: list[bytes]
    label: str

    def requests(self, port: int) -> list[bytes]:
        """The request bytes for a server on ``port``."""
        return [build_request(HOST, port, self.path, body) for body in self.bodies]


def workload(path: str, items: list[Any], backend: str, **fields: Any) -> Workload:
    """One request per item: ``{"inputs": [text]}`` for ``/encode``, ``{"series": [s]}`` for
    ``/forecast``, with ``attention`` and ``fields``."""
    key = "inputs" if path == "/encode" else "series"
    bodies = [{**fields, key: [item], "attention": backend} for item in items]
    return Workload(
        path, [json.dumps(body).encode() for body in bodies], f"{path[1:]:>8} {backend:>10}"
    )
