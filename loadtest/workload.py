"""What the load test sends and how it sums up the results: pure Python, no locust, no torch.

Kept apart from ``locustfile.py`` (which imports locust, and so gevent's monkey-patching) so the
runner and the test suite can use it in ordinary processes.
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One percentile rule for every latency figure the project prints (nearest rank).
from benchmarks.harness.timing import percentile

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR_ENV = "ATTNSERVE_DATA_DIR"
BACKENDS = ("full", "flash", "probsparse", "performer", "nystrom")
ENDPOINTS = ("forecast", "encode")

# ETTh1 standard split (data/ETT/README.md): test rows [11520, 14400), 0-based, no header.
TEST_ROWS = (11_520, 14_400)


# ----------------------------------------------------------------------------- configuration


def parse_mix(text: str, allowed: Sequence[str], what: str) -> dict[str, float]:
    """Weights from ``"a:3,b:1"`` (a bare name weighs 1; ``"all"`` or ``""`` = every allowed name
    with weight 1). Unknown names and non-positive totals are errors."""
    text = text.strip()
    if text in ("", "all"):
        return dict.fromkeys(allowed, 1.0)
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.strip().partition(":")
        name = name.strip()
        if name not in allowed:
            raise ValueError(f"unknown {what} {name!r} in {text!r}; known: {', '.join(allowed)}")
        try:
            value = float(weight) if weight.strip() else 1.0
        except ValueError:
            raise ValueError(f"bad weight {weight!r} for {what} {name!r} in {text!r}") from None
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"weight of {what} {name!r} must be >= 0, got {value}")
        mix[name] = mix.get(name, 0.0) + value
    if sum(mix.values()) <= 0:
        raise ValueError(f"the {what} mix {text!r} has no positive weight")
    return {k: v for k, v in mix.items() if v > 0}


def restrict_mix(mix: Mapping[str, float], available: Iterable[str]) -> dict[str, float]:
    """The part of ``mix`` a model can serve (empty when nothing is left)."""
    have = set(available)
    return {k: v for k, v in mix.items() if k in have}


def pick(rng: random.Random, mix: Mapping[str, float]) -> str:
    """One name drawn with the mix's weights."""
    names = list(mix)
    return rng.choices(names, weights=[mix[n] for n in names], k=1)[0]


# ----------------------------------------------------------------------------- forecast data


def data_dir() -> Path:
    """Root of the data sets: ``$ATTNSERVE_DATA_DIR``, else the repository's own ``data/``."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else REPO_ROOT / "data"


@dataclass(frozen=True)
class EttTable:
    """The ETTh1 test split: timestamps and the channel columns by name."""

    timestamps: list[str]
    columns: dict[str, list[float]]

    def __len__(self) -> int:
        return len(self.timestamps)

    def window(
        self, start: int, length: int, channels: Sequence[str]
    ) -> tuple[list[str], list[list[float]]]:
        """Rows ``[start, start + length)`` of the split as (timestamps, rows of ``channels``)."""
        if not 0 <= start <= len(self) - length:
            raise ValueError(f"window [{start}, {start + length}) is outside 0..{len(self)}")
        cols = [self.columns[c] for c in channels]
        return (
            self.timestamps[start : start + length],
            [[col[i] for col in cols] for i in range(start, start + length)],
        )

    def random_window(
        self, rng: random.Random, length: int, channels: Sequence[str]
    ) -> tuple[list[str], list[list[float]]]:
        if length > len(self):
            raise ValueError(f"a window of {length} rows does not fit in {len(self)} test rows")
        return self.window(rng.randrange(0, len(self) - length + 1), length, channels)


def load_ett_test(path: Path | None = None, rows: tuple[int, int] = TEST_ROWS) -> EttTable:
    """Read the ETTh1 test rows (``ETT/ETTh1.csv`` under :func:`data_dir` by default)."""
    path = path or data_dir() / "ETT" / "ETTh1.csv"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: ETTh1 ships in the repository's data/ETT/; if {DATA_DIR_ENV} "
            "is set, it must name a folder that holds ETT/ETTh1.csv"
        )
    first, last = rows
    timestamps: list[str] = []
    columns: dict[str, list[float]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        names = header[1:]
        columns = {n: [] for n in names}
        for i, record in enumerate(reader):
            if i < first:
                continue
            if i >= last:
                break
            timestamps.append(record[0])
            for name, value in zip(names, record[1:], strict=True):
                columns[name].append(float(value))
    if len(timestamps) != last - first:
        raise ValueError(f"{path} has only {first + len(timestamps)} data rows; need {last}")
    return EttTable(timestamps, columns)


# ----------------------------------------------------------------------------- encode data

_SENTENCES = (
    "The transformer's oil temperature rose sharply during the afternoon peak.",
    "Attention lets every token look at every other token in the sequence.",
    "A quick brown fox jumps over the lazy dog.",
    "Grid operators forecast load a day ahead to schedule generation.",
    "Sparse attention keeps only the queries that matter most.",
    "Random features approximate the softmax kernel without materialising it.",
    "The Nystrom method rebuilds a large matrix from a few landmark columns.",
    "Batching requests together raises throughput at a small cost in latency.",
    "She bought fresh bread, cheese and a bottle of olive oil at the market.",
    "Rain is expected over the northern hills by late evening.",
    "The committee postponed its decision until the next quarterly meeting.",
    "Hourly readings show a clear daily cycle in the useful load.",
    "Long documents are cut at the model's token limit when truncation is on.",
    "Sentence embeddings place similar meanings close together.",
    "The river flooded the lower fields after three days of storms.",
    "Latency percentiles tell more about user experience than averages do.",
)


def make_text(rng: random.Random, sentences: int) -> str:
    """A text of about ``sentences`` sentences (~14 tokens each)."""
    return " ".join(rng.choice(_SENTENCES) for _ in range(max(1, sentences)))


# Short queries, paragraphs and long passages (the longest are over 256 tokens, cut with
# ``truncate: true``): (weight, sentences low, high).
TEXT_LENGTHS = ((6, 1, 1), (3, 2, 6), (1, 10, 25))


def make_texts(rng: random.Random, max_texts: int) -> list[str]:
    """1..``max_texts`` texts of varied length."""
    n = rng.randint(1, max(1, max_texts))
    out = []
    for _ in range(n):
        _, low, high = rng.choices(TEXT_LENGTHS, weights=[w for w, _, _ in TEXT_LENGTHS], k=1)[0]
        out.append(make_text(rng, rng.randint(low, high)))
    return out


# ----------------------------------------------------------------------------- results


@dataclass
class Samples:
    """Per (endpoint, backend): client latency and the server's own timing headers."""

    client_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    inference_ms: list[float] = field(default_factory=list)
    batch_rows: list[float] = field(default_factory=list)
    failures: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def summary(self, seconds: float) -> dict[str, Any]:
        n = len(self.client_ms)
        return {
            "requests": n + self.failures,
            "ok": n,
            "failures": self.failures,
            "statuses": dict(sorted(self.statuses.items())),
            "throughput_rps": n / seconds if seconds > 0 else math.nan,
            "client_ms": {f"p{q}": percentile(self.client_ms, q) for q in (50, 95, 99)},
            "queue_ms": {f"p{q}": percentile(self.queue_ms, q) for q in (50, 95, 99)},
            "inference_ms": {f"p{q}": percentile(self.inference_ms, q) for q in (50, 95, 99)},
            "batch_rows_mean": (sum(self.batch_rows) / len(self.batch_rows))
            if self.batch_rows
            else math.nan,
        }


def summarise(samples: Mapping[str, Samples], seconds: float) -> dict[str, Any]:
    """The JSON document the locustfile writes at the end of a run."""
    total = Samples()
    for s in samples.values():
        total.client_ms += s.client_ms
        total.queue_ms += s.queue_ms
        total.inference_ms += s.inference_ms
        total.batch_rows += s.batch_rows
        total.failures += s.failures
        for k, v in s.statuses.items():
            total.statuses[k] = total.statuses.get(k, 0) + v
    return {
        "seconds": seconds,
        "by_name": {name: s.summary(seconds) for name, s in sorted(samples.items())},
        "total": total.summary(seconds),
    }


def _fmt(value: float, digits: int = 1) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.{digits}f}"
    )


def format_table(summary: Mapping[str, Any]) -> str:
    """A plain-text table of a :func:`summarise` document."""
    head = (
        f"{'endpoint [backend]':<28}{'reqs':>6}{'fail':>6}{'rps':>7}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'queue p50/p95':>15}{'infer p50/p95':>15}{'batch':>7}"
    )
    lines = [head, "-" * len(head)]
    rows = [*summary["by_name"].items(), ("TOTAL", summary["total"])]
    for name, s in rows:
        c, qd, inf = s["client_ms"], s["queue_ms"], s["inference_ms"]
        lines.append(
            f"{name:<28}{s['requests']:>6}{s['failures']:>6}{_fmt(s['throughput_rps'], 2):>7}"
            f"{_fmt(c['p50']):>9}{_fmt(c['p95']):>9}{_fmt(c['p99']):>9}"
            f"{_fmt(qd['p50']) + '/' + _fmt(qd['p95']):>15}"
            f"{_fmt(inf['p50']) + '/' + _fmt(inf['p95']):>15}{_fmt(s['batch_rows_mean']):>7}"
        )
    return "\n".join(lines)


def check(summary: Mapping[str, Any], max_p99_ms: float | None) -> list[str]:
    """Why the run failed (empty when it passed): any failure, no request at all, or a p99
    over ``max_p99_ms`` for any endpoint/backend."""
    problems = []
    total = summary["total"]
    if total["requests"] == 0:
        problems.append("no request was made")
    if total["failures"]:
        problems.append(f"{total['failures']} failed requests (statuses {total['statuses']})")
    if max_p99_ms is not None:
        for name, s in summary["by_name"].items():
            p99 = s["client_ms"]["p99"]
            if not math.isnan(p99) and p99 > max_p99_ms:
                problems.append(f"{name}: p99 {p99:.0f} ms > {max_p99_ms:.0f} ms")
    return problems
