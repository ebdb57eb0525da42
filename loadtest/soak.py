"""Soak test: minutes of varied-length encode and forecast traffic, RSS / p99 / errors per minute.

    python loadtest/soak.py --start-server --minutes 10 --clients 8
    python loadtest/soak.py --host http://127.0.0.1:8000 --minutes 10

Each client is a thread on its own keep-alive connection sending, back to back, an ``/encode``
of 1-4 texts of 1-250 tokens (every length is a new tensor shape) or a ``/forecast`` of 1-8
ETTh1 windows, under a backend drawn per request. Every minute it prints the requests, errors,
p50/p99 latency and the server's resident memory (``attnserve_process_resident_memory_bytes``
from ``/metrics``). Memory is *flat* when the RSS of every later minute stays within
``--max-growth`` (15 %) of the first minute's: the process has reached a plateau instead of
creeping up with every new shape. Exits 1 on growth past that, on any failed request, or when
the server would not start. Writes ``loadtest/results/soak-<time>/soak.json``.

Standard library only (plus this repository's ``loadtest`` helpers), so it runs anywhere.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadtest.run import RESULTS, LocalServer
from loadtest.workload import load_ett_test, make_text, percentile

RSS_METRIC = "attnserve_process_resident_memory_bytes"
ENCODE_BACKENDS = ("flash", "flash", "full", "performer", "nystrom", "probsparse")
FORECAST_BACKENDS = ("probsparse", "flash", "full", "performer")
CHANNELS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")


@dataclass
class Minute:
    """What the clients saw in one minute."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


class Traffic:
    """Builds request bodies: texts of 1..250 tokens, 1..8 ETTh1 windows of the model's context."""

    def __init__(self, seed: int, forecast_model: str, context: int) -> None:
        self.rng = random.Random(seed)
        self.forecast_model, self.context = forecast_model, context
        self.table = load_ett_test()

    def encode(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        # ~14 tokens a sentence: 1..18 sentences spans 1..250 tokens, cut at the limit.
        texts = [make_text(rng, rng.randint(1, 18)) for _ in range(rng.randint(1, 4))]
        texts = [t[: rng.randint(3, len(t))] for t in texts]  # every length, not multiples of 14
        body = {"inputs": texts, "truncate": True, "attention": rng.choice(ENCODE_BACKENDS)}
        return "/encode", body

    def forecast(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        series = []
        for _ in range(rng.randint(1, 8)):
            stamps, rows = self.table.random_window(rng, self.context, CHANNELS)
            series.append({"timestamps": stamps, "values": rows})
        body = {
            "model": self.forecast_model,
            "series": series,
            "attention": rng.choice(FORECAST_BACKENDS),
        }
        return "/forecast", body


def rss_bytes(host: str) -> float | None:
    """The server's resident memory from its ``/metrics`` (summed over worker processes)."""
    try:
        with urllib.request.urlopen(f"{host}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return None
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(RSS_METRIC) and not line.startswith("#")
    ]
    return sum(values) if values else None


def model_context(host: str, name: str) -> int:
    with urllib.request.urlopen(f"{host}/models/{name}", timeout=10) as response:
        return int(json.load(response)["context"])


def client(
    host: str,
    traffic: Traffic,
    lock: threading.Lock,
    minutes: list[Minute],
    started: float,
    stop: threading.Event,
    forecast_share: float,
) -> None:
    """One closed-loop client on a keep-alive connection (reconnects when the server closes)."""
    parsed = urllib.parse.urlsplit(host)
    connection: http.client.HTTPConnection | None = None
    while not stop.is_set():
        with lock:
            path, body = (
                traffic.forecast() if traffic.rng.random() < forecast_share else traffic.encode()
            )
        payload = json.dumps(body).encode()
        sent = time.monotonic()
        status = 0
        try:
            if connection is None:
                connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
            connection.request("POST", path, payload, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            status = response.status
            if response.getheader("connection", "").lower() == "close":
                connection.close()
                connection = None
        except (OSError, http.client.HTTPException):
            if connection is not None:
                connection.close()
            connection = None
        elapsed_ms = (time.monotonic() - sent) * 1000
        index = int((time.monotonic() - started) // 60)
        with lock:
            if index >= len(minutes):
                continue
            minute = minutes[index]
            minute.statuses[status] = minute.statuses.get(status, 0) + 1
            if status == 200:
                minute.latencies_ms.append(elapsed_ms)
            else:
                minute.errors += 1


def soak(host: str, args: argparse.Namespace) -> dict[str, Any]:
    traffic = Traffic(args.seed, args.forecast_model, model_context(host, args.forecast_model))
    minutes = [Minute() for _ in range(args.minutes)]
    lock, stop = threading.Lock(), threading.Event()
    started = time.monotonic()
    threads = [
        threading.Thread(
            target=client,
            args=(host, traffic, lock, minutes, started, stop, args.forecast_share),
            daemon=True,
        )
        for _ in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    rows: list[dict[str, Any]] = []
    print("| minute | requests | errors | p50 ms | p99 ms | RSS MiB | RSS vs minute 1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for index in range(args.minutes):
        time.sleep(max(0.0, started + 60 * (index + 1) - time.monotonic()))
        rss = rss_bytes(host)
        with lock:
            minute = minutes[index]
            latencies, errors = list(minute.latencies_ms), minute.errors
        first = rows[0]["rss_mib"] if rows else None
        row = {
            "minute": index + 1,
            "requests": len(latencies) + errors,
            "errors": errors,
            "statuses": dict(minute.statuses),
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
            "rss_mib": None if rss is None else rss / 2**20,
        }
        growth = None if first is None or row["rss_mib"] is None else row["rss_mib"] / first - 1
        row["growth"] = growth
        rows.append(row)
        rss_text = "-" if row["rss_mib"] is None else f"{row['rss_mib']:.0f}"
        growth_text = "-" if growth is None else f"{growth:+.1%}"
        print(
            f"| {row['minute']} | {row['requests']} | {errors} | {row['p50_ms']:.0f} | "
            f"{row['p99_ms']:.0f} | {rss_text} | {growth_text} |",
            flush=True,
        )
    stop.set()
    for thread in threads:
        thread.join(timeout=130)
    growths = [r["growth"] for r in rows if r["growth"] is not None]
    return {
        "host": host,
        "clients": args.clients,
        "minutes": rows,
        "max_growth": max(growths) if growths else None,
        "errors": sum(r["errors"] for r in rows),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--host", help="a running server, e.g. http://127.0.0.1:8000")
    target.add_argument("--start-server", action="store_true", help="start `attnserve serve`")
    p.add_argument("--minutes", type=int, default=10)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--forecast-share", type=float, default=0.3, help="share of /forecast requests")
    p.add_argument("--forecast-model", default="informer-etth1-h24")
    p.add_argument(
        "--max-growth", type=float, default=0.15, help="RSS growth allowed after minute 1"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="with --start-server")
    p.add_argument("--workers", type=int, default=1, help="with --start-server")
    p.add_argument(
        "--models",
        default="all-MiniLM-L6-v2,informer-etth1-h24",
        help="with --start-server: ATTNSERVE_MODELS",
    )
    p.add_argument("--api-key", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help="results folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or RESULTS / time.strftime("soak-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    server = None
    if args.start_server:
        server = LocalServer(args, out / "server.log")
        try:
            server.wait_ready(600)
        except RuntimeError as exc:
            print(f"soak: {exc}\n{server.log_tail()}", file=sys.stderr)
            server.stop()
            return 1
    host = args.host.rstrip("/") if args.host else server.url  # type: ignore[union-attr]
    try:
        result = soak(host, args)
    finally:
        if server is not None:
            server.stop()
    (out / "soak.json").write_text(json.dumps(result, indent=1))
    problems = []
    if result["errors"]:
        problems.append(f"{result['errors']} requests failed")
    if result["max_growth"] is not None and result["max_growth"] > args.max_growth:
        problems.append(
            f"RSS grew {result['max_growth']:.1%} after minute 1 (allowed {args.max_growth:.0%})"
        )
    print("soak: " + ("; ".join(problems) if problems else "flat memory, no errors"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
