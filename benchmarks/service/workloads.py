"""The request workloads the service benchmarks share: short texts and ETTh1 test windows."""

from __future__ import annotations

from typing import Any


def short_texts(n: int) -> list[str]:
    """``n`` texts of 8 to 24 words."""
    from models.text.corpus import word_windows

    pool = word_windows(n, 24)
    return [" ".join(t.split()[: 8 + (i * 7) % 17]) for i, t in enumerate(pool)]


def etth1_windows(context: int, n: int) -> list[dict[str, Any]]:
    """``n`` test-split histories of ``context`` rows (as request ``series`` items)."""
    from models.training.data import SPLIT_BORDERS, load_etth1

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
