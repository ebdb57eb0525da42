"""Headless load test of attnserve: locust for N users and a duration, reports, pass/fail.

    python loadtest/run.py --host http://127.0.0.1:8000 --users 8 --rps 8 --duration 60s
    python loadtest/run.py --start-server --device cpu --users 4 --rps 4 --duration 20s

Writes locust's CSV files and HTML report plus ``summary.json`` (client latency next to the
server's queue/inference time and batch size, per endpoint and backend) under
``loadtest/results/<run>/``, prints p50/p95/p99 and throughput per endpoint and backend, and
exits 1 on any failed request, on a p99 over ``--max-p99-ms``, or when the server would not start.

Locust runs in its own process (it monkey-patches the standard library through gevent); this
script imports only the standard library and ``loadtest.workload``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadtest.workload import REPO_ROOT, check, format_table

HERE = Path(__file__).resolve().parent
LOCUSTFILE = HERE / "locustfile.py"
RESULTS = HERE / "results"


def parse_duration(text: str) -> float:
    """Seconds in a locust ``--run-time`` value such as ``20s``, ``2m``, ``1h30m`` or ``45``."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use e.g. 20s, 5m, 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of ``GET url`` (None when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (OSError, ValueError):
        return None


def server_command() -> list[str]:
    """``python -m service`` (the same program as the ``attnserve`` script) run from the repository
    root, so it serves this checkout even where an editable install's path mapping is stale."""
    return [sys.executable, "-m", "service"]


class LocalServer:
    """``attnserve serve`` on a free 127.0.0.1 port, logging to a file; stopped with SIGTERM."""

    def __init__(self, args: argparse.Namespace, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.update(
            ATTNSERVE_HOST="127.0.0.1",
            ATTNSERVE_PORT=str(self.port),
            ATTNSERVE_DEVICE=args.device,
            ATTNSERVE_WORKERS=str(args.workers),
            ATTNSERVE_LOG_LEVEL="warning",
        )
        if args.models:
            env["ATTNSERVE_MODELS"] = args.models
        if args.api_key:
            env["ATTNSERVE_API_KEY"] = args.api_key
        self.log_path = log_path
        self.log = log_path.open("wb")
        self.process = subprocess.Popen(
            [*server_command(), "serve"],
            env=env,
            cwd=REPO_ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            if http_status(f"{self.url}/readyz") == 200:
                return
            time.sleep(0.25)
        raise RuntimeError(f"the server was not ready within {timeout:.0f} s")

    def log_tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 30.0) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()
        return self.process.returncode


def locust_command(args: argparse.Namespace, host: str, out: Path, user_rate: float) -> list[str]:
    command = [
        sys.executable, "-m", "locust",
        "-f", str(LOCUSTFILE),
        "--headless",
        "--host", host,
        "--users", str(args.users),
        "--spawn-rate", str(args.spawn_rate or args.users),
        "--run-time", args.duration,
        "--stop-timeout", str(int(args.stop_timeout)),
        "--csv", str(out / "locust"),
        "--html", str(out / "report.html"),
        "--only-summary",
        "--loglevel", "WARNING",
        "--exit-code-on-error", "1",
        # workload options (see locustfile.py)
        "--user-rate", f"{user_rate:.6g}",
        "--arrivals", args.arrivals,
        "--endpoint-mix", args.endpoint_mix,
        "--attention-mix", args.attention_mix,
        "--max-texts", str(args.max_texts),
        "--seed", str(args.seed),
        "--timings-file", str(out / "summary.json"),
    ]  # fmt: skip
    if args.forecast_models:
        command += ["--forecast-models", args.forecast_models]
    return command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadtest/run.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--host", default="http://127.0.0.1:8000", help="Server to load.")
    target.add_argument(
        "--start-server",
        action="store_true",
        help="Start `attnserve serve` on a free 127.0.0.1 port, wait for /readyz, stop it after.",
    )
    p.add_argument("--users", type=int, default=4, help="Concurrent locust users.")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--rps", type=float, help="Offered requests/s in total (default: users).")
    rate.add_argument("--user-rate", type=float, help="Offered requests/s per user.")
    p.add_argument("--arrivals", choices=["poisson", "constant"], default="poisson")
    p.add_argument("--duration", default="30s", help="Run time: 20s, 5m, 1h30m.")
    p.add_argument(
        "--spawn-rate", type=float, help="Users started per second (default: all at once)."
    )
    p.add_argument(
        "--stop-timeout", type=float, default=15, help="Seconds in-flight requests get at the end."
    )
    p.add_argument("--endpoint-mix", default="forecast:1,encode:1", help="e.g. forecast:3,encode:1")
    p.add_argument("--attention-mix", default="all", help="e.g. full:1,flash:1,probsparse:2")
    p.add_argument(
        "--forecast-models",
        default="",
        help="Forecasters to call (default: every hourly one loaded; the workload is ETTh1).",
    )
    p.add_argument("--max-texts", type=int, default=4, help="Texts per /encode request: 1..N.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-p99-ms", type=float, help="Fail when any endpoint/backend p99 is over this."
    )
    p.add_argument("--results", type=Path, help="Output folder (default: loadtest/results/<time>).")
    p.add_argument(
        "--api-key", default=os.environ.get("ATTNSERVE_API_KEY", ""), help="Bearer token."
    )
    server = p.add_argument_group("with --start-server")
    server.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    server.add_argument(
        "--models", default="", help="ATTNSERVE_MODELS for the server (default: its own)."
    )
    server.add_argument(
        "--workers", type=int, default=1, help="Server processes (ATTNSERVE_WORKERS; CPU only)."
    )
    server.add_argument(
        "--ready-timeout", type=float, default=90, help="Seconds to wait for /readyz."
    )
    return p  # fmt: skip


def report(summary: dict[str, Any], offered_rps: float, out: Path) -> None:
    print(format_table(summary))
    achieved = summary["total"]["throughput_rps"]
    print(
        f"\noffered {offered_rps:.2f} req/s, answered {achieved:.2f} req/s over "
        f"{summary['seconds']:.1f} s; missed arrivals (clients behind schedule): "
        f"{summary.get('missed_arrivals', 0)}"
    )
    print(f"reports: {out}/ (report.html, locust_stats.csv, summary.json)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the server started below is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    seconds = parse_duration(args.duration)
    if args.users < 1:
        raise SystemExit("--users must be >= 1")
    offered = args.rps if args.rps is not None else (args.user_rate or 1.0) * args.users
    user_rate = args.user_rate if args.user_rate is not None else offered / args.users
    out = args.results or RESULTS / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").unlink(missing_ok=True)

    server: LocalServer | None = None
    host = args.host
    try:
        if args.start_server:
            server = LocalServer(args, out / "server.log")
            started = time.monotonic()
            try:
                server.wait_ready(args.ready_timeout)
            except RuntimeError as error:
                print(
                    f"FAIL: {error}\n--- server.log (tail) ---\n{server.log_tail()}",
                    file=sys.stderr,
                )
                return 1
            host = server.url
            print(f"server ready at {host} in {time.monotonic() - started:.1f} s")
        env = dict(os.environ)
        if args.api_key:
            env["ATTNSERVE_API_KEY"] = args.api_key
        command = locust_command(args, host, out, user_rate)
        print(f"locust: {args.users} users, {offered:.2f} req/s offered, {args.duration} on {host}")
        try:
            result = subprocess.run(
                command, env=env, timeout=seconds + args.stop_timeout + 120, check=False
            )
            locust_rc = result.returncode
        except subprocess.TimeoutExpired:
            print("FAIL: locust did not finish in time", file=sys.stderr)
            return 1
        summary_path = out / "summary.json"
        if not summary_path.is_file():
            print(f"FAIL: locust exited {locust_rc} without a summary", file=sys.stderr)
            return 1
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        report(summary, offered, out)
        problems = check(summary, args.max_p99_ms)
        if locust_rc != 0 and not problems:
            problems.append(f"locust exited {locust_rc} (see {out}/locust_failures.csv)")
        if problems:
            print("FAIL: " + "; ".join(problems), file=sys.stderr)
            return 1
        print("PASS")
        return 0
    finally:
        if server is not None:
            code = server.stop()
            if code not in (0, None):
                print(
                    f"warning: the server exited with {code} (see {server.log_path})",
                    file=sys.stderr,
                )


if __name__ == "__main__":
    sys.exit(main())
