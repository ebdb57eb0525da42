"""Locust workload for attnserve: ``/forecast`` on real ETTh1 windows, ``/encode`` on texts of
varied length, each request with an attention backend drawn from a configurable mix.

Run headless through ``loadtest/run.py`` (reports, thresholds, optional local server), or
directly: ``locust -f loadtest/locustfile.py --host http://127.0.0.1:8000``.

Options (command line flag, or the environment variable in brackets):

- ``--endpoint-mix`` [ATTNSERVE_ENDPOINT_MIX]: ``forecast:1,encode:1`` (weights).
- ``--attention-mix`` [ATTNSERVE_ATTENTION_MIX]: ``all`` or e.g. ``full:1,flash:2,probsparse:1``;
  a backend a model does not serve is left out for that model.
- ``--forecast-models`` [ATTNSERVE_FORECAST_MODELS]: comma-separated; default every hourly
  forecaster in ``GET /models`` (the workload sends ETTh1 windows).
- ``--user-rate`` [ATTNSERVE_USER_RATE]: requests per second per user (see pacing below).
- ``--arrivals`` [ATTNSERVE_ARRIVALS]: ``poisson`` (exponential gaps) or ``constant``.
- ``--max-texts`` [ATTNSERVE_MAX_TEXTS]: texts per /encode request, 1..N.
- ``--api-key`` [ATTNSERVE_API_KEY]: sent as ``Authorization: Bearer``.
- ``--timings-file`` [ATTNSERVE_TIMINGS_FILE]: where to write the per endpoint/backend summary
  (client latency next to the server's queue and inference time and batch size) as JSON.

Pacing keeps an open arrival rate: each user follows its own arrival schedule (``user-rate``
per second) and the wait after a request is the time left until the next scheduled arrival, so
a slow response does not lower the offered rate; it is made up at once. A user that is more than
``MAX_LAG_S`` behind (the server is saturated: users x rate exceeds what it answers) skips the
missed arrivals and counts them (``missed_arrivals`` in the summary) rather than burst.

Server timings: the response headers ``x-queue-time-ms``, ``x-inference-time-ms`` and
``x-batch-size`` are recorded as extra request events (type ``QUEUE`` / ``INFER``, same name as
the client request) so they show up beside client latency in locust's stats, CSV and HTML, and
into the JSON summary with the mean batch size. Any non-2xx response is a failure.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, events, task
from locust.env import Environment

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadtest.workload import (
    BACKENDS,
    ENDPOINTS,
    EttTable,
    Samples,
    load_ett_test,
    make_texts,
    parse_mix,
    pick,
    restrict_mix,
    summarise,
)

log = logging.getLogger("attnserve.loadtest")
MAX_LAG_S = 1.0
_USER_NUMBERS = itertools.count()


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--endpoint-mix",
        env_var="ATTNSERVE_ENDPOINT_MIX",
        default="forecast:1,encode:1",
        help="Weights of /forecast and /encode, e.g. forecast:3,encode:1.",
    )
    parser.add_argument(
        "--attention-mix",
        env_var="ATTNSERVE_ATTENTION_MIX",
        default="all",
        help="Attention backends and weights, e.g. full:1,probsparse:2 (all: equal).",
    )
    parser.add_argument(
        "--forecast-models",
        env_var="ATTNSERVE_FORECAST_MODELS",
        default="",
        help="Forecasters to call (comma-separated); default: all loaded.",
    )
    parser.add_argument(
        "--user-rate",
        env_var="ATTNSERVE_USER_RATE",
        type=float,
        default=1.0,
        help="Requests per second per user (open arrivals).",
    )
    parser.add_argument(
        "--arrivals",
        env_var="ATTNSERVE_ARRIVALS",
        choices=["poisson", "constant"],
        default="poisson",
        help="Gaps between a user's arrivals.",
    )
    parser.add_argument(
        "--max-texts",
        env_var="ATTNSERVE_MAX_TEXTS",
        type=int,
        default=4,
        help="Texts per /encode request: 1..N.",
    )
    parser.add_argument(
        "--api-key",
        env_var="ATTNSERVE_API_KEY",
        default="",
        is_secret=True,
        help="Bearer token when the server has an API key.",
    )
    parser.add_argument(
        "--timings-file",
        env_var="ATTNSERVE_TIMINGS_FILE",
        default="",
        include_in_web_ui=False,
        help="Write the JSON summary here at the end.",
    )
    parser.add_argument(
        "--seed",
        env_var="ATTNSERVE_LOADTEST_SEED",
        type=int,
        default=0,
        help="Seed of the users' random choices.",
    )


class Workload:
    """What every user shares: options, model cards, the ETTh1 test split, the results."""

    def __init__(self, environment: Environment) -> None:
        opts = environment.parsed_options
        self.endpoint_mix = parse_mix(opts.endpoint_mix, ENDPOINTS, "endpoint")
        self.attention_mix = parse_mix(opts.attention_mix, BACKENDS, "attention backend")
        self.user_rate = float(opts.user_rate)
        if self.user_rate <= 0:
            raise ValueError("--user-rate must be > 0")
        self.poisson = opts.arrivals == "poisson"
        self.max_texts = int(opts.max_texts)
        self.headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
        self.timings_file = opts.timings_file
        self.seed = int(opts.seed)
        self.cards = self._fetch_cards(environment.host or "")
        self.forecasters = self._forecasters(opts.forecast_models)
        self.encoders = {
            c["name"]: mix
            for c in self.cards
            if c.get("task") == "encode"
            and (mix := restrict_mix(self.attention_mix, c.get("served_backends", BACKENDS)))
        }
        self.ett: EttTable | None = load_ett_test() if self.forecasters else None
        if not self.forecasters:
            self.endpoint_mix.pop("forecast", None)
        if not self.encoders:
            self.endpoint_mix.pop("encode", None)
        if not self.endpoint_mix:
            raise RuntimeError("no loaded model serves the requested endpoints and backends")
        self.samples: dict[str, Samples] = {}
        self.missed_arrivals = 0
        self.lock = threading.Lock()  # gevent-patched: a greenlet lock
        self.started = time.monotonic()
        self.stopped: float | None = None

    def _fetch_cards(self, host: str) -> list[dict[str, Any]]:
        request = urllib.request.Request(f"{host.rstrip('/')}/models", headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return list(json.load(response)["data"])

    def _forecasters(self, wanted: str) -> dict[str, tuple[dict[str, Any], dict[str, float]]]:
        names = [n.strip() for n in wanted.split(",") if n.strip()]
        cards = {c["name"]: c for c in self.cards if c.get("task") == "forecast"}
        unknown = [n for n in names if n not in cards]
        if unknown:
            raise ValueError(f"forecasters not loaded: {unknown}; loaded: {sorted(cards)}")
        # The workload sends ETTh1 test windows: hourly forecasters only.
        hourly = sorted(n for n, c in cards.items() if c.get("freq") == "h")
        other = [n for n in names if n not in hourly]
        if other:
            raise ValueError(
                f"{other} are not hourly forecasters; the workload sends ETTh1 (hourly) windows: "
                f"pick among {hourly}"
            )
        out = {}
        for name in names or hourly:
            mix = restrict_mix(self.attention_mix, cards[name].get("served_backends", BACKENDS))
            if mix:
                out[name] = (cards[name], mix)
        return out

    def record(self, name: str, status: int, client_ms: float, headers: Any) -> None:
        with self.lock:
            s = self.samples.setdefault(name, Samples())
            s.statuses[str(status)] = s.statuses.get(str(status), 0) + 1
            if not 200 <= status < 300:
                s.failures += 1
                return
            s.client_ms.append(client_ms)
            for header, values in (
                ("x-queue-time-ms", s.queue_ms),
                ("x-inference-time-ms", s.inference_ms),
                ("x-batch-size", s.batch_rows),
            ):
                value = headers.get(header)
                if value is not None:
                    values.append(float(value))

    def summary(self) -> dict[str, Any]:
        seconds = (self.stopped or time.monotonic()) - self.started
        out = summarise(self.samples, seconds)
        out["missed_arrivals"] = self.missed_arrivals
        out["offered"] = {
            "user_rate": self.user_rate,
            "arrivals": "poisson" if self.poisson else "constant",
            "endpoint_mix": self.endpoint_mix,
            "attention_mix": self.attention_mix,
            "forecasters": sorted(self.forecasters),
            "encoders": sorted(self.encoders),
        }
        return out


WORKLOAD: Workload | None = None


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    global WORKLOAD
    try:
        WORKLOAD = Workload(environment)
    except Exception as exc:  # no cards, no data, a bad mix: stop at once with the reason
        log.error("cannot set up the attnserve workload: %s", exc)
        environment.process_exit_code = 1
        if environment.runner is not None:
            environment.runner.quit()
        return
    log.info(
        "attnserve workload: endpoints %s, forecasters %s, encoders %s",
        WORKLOAD.endpoint_mix,
        {k: list(v[1]) for k, v in WORKLOAD.forecasters.items()},
        {k: list(v) for k, v in WORKLOAD.encoders.items()},
    )


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    if WORKLOAD is None:
        return
    WORKLOAD.stopped = time.monotonic()
    if WORKLOAD.timings_file:
        path = Path(WORKLOAD.timings_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(WORKLOAD.summary(), indent=2, default=str), encoding="utf-8")


class AttnserveUser(FastHttpUser):
    """One client: picks an endpoint, a model and a backend per request, on an open schedule."""

    # A request stuck longer than this is a client-side failure (the server's own timeout is
    # ATTNSERVE_REQUEST_TIMEOUT_S, 30 s by default, answered as a 504).
    network_timeout = 60.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        assert WORKLOAD is not None, "the test_start listener sets up the workload"
        self.work = WORKLOAD
        self.rng = random.Random(self.work.seed * 1_000_003 + next(_USER_NUMBERS))
        # Stagger the users' first arrivals over one gap so they do not start in lock-step.
        self.next_arrival = time.monotonic() + self.rng.uniform(0, 1 / self.work.user_rate)
        gevent.sleep(max(0.0, self.next_arrival - time.monotonic()))

    def wait_time(self) -> float:
        gap = (
            self.rng.expovariate(self.work.user_rate)
            if self.work.poisson
            else 1 / self.work.user_rate
        )
        self.next_arrival += gap
        now = time.monotonic()
        if now - self.next_arrival > MAX_LAG_S:
            missed = int((now - self.next_arrival) * self.work.user_rate)
            self.work.missed_arrivals += missed
            self.next_arrival = now
        return max(0.0, self.next_arrival - now)

    @task
    def one_request(self) -> None:
        if pick(self.rng, self.work.endpoint_mix) == "forecast":
            self.forecast()
        else:
            self.encode()

    def forecast(self) -> None:
        model = self.rng.choice(sorted(self.work.forecasters))
        card, mix = self.work.forecasters[model]
        backend = pick(self.rng, mix)
        assert self.work.ett is not None
        timestamps, values = self.work.ett.random_window(
            self.rng, int(card["context"]), list(card["channels"])
        )
        body = {
            "model": model,
            "attention": backend,
            "series": [{"timestamps": timestamps, "values": values}],
        }
        self._post("/forecast", backend, body, lambda r: len(r["forecasts"]) == 1)

    def encode(self) -> None:
        model = self.rng.choice(sorted(self.work.encoders))
        backend = pick(self.rng, self.work.encoders[model])
        texts = make_texts(self.rng, self.work.max_texts)
        body = {"inputs": texts, "model": model, "attention": backend, "truncate": True}
        self._post("/encode", backend, body, lambda r: len(r["embeddings"]) == len(texts))

    def _post(self, path: str, backend: str, body: dict[str, Any], valid: Any) -> None:
        name = f"{path} [{backend}]"
        started = time.perf_counter()
        with self.client.post(
            path, json=body, headers=self.work.headers, name=name, catch_response=True
        ) as response:
            client_ms = (time.perf_counter() - started) * 1000
            status = int(response.status_code or 0)
            if not 200 <= status < 300:
                detail = (response.text or "")[:200]
                response.failure(f"HTTP {status}: {detail}")
            else:
                try:
                    ok = bool(valid(response.json()))
                except Exception as exc:  # a 2xx with a body we cannot read is a failure too
                    ok, detail = False, f"unreadable body: {exc}"
                else:
                    detail = "unexpected number of results"
                if not ok:
                    status = -1
                    response.failure(detail)
            self.work.record(name, status, client_ms, response.headers)
        if 200 <= status < 300:
            self._server_events(name, response.headers)

    def _server_events(self, name: str, headers: Any) -> None:
        for request_type, header in (
            ("QUEUE", "x-queue-time-ms"),
            ("INFER", "x-inference-time-ms"),
        ):
            value = headers.get(header)
            if value is not None:
                self.environment.events.request.fire(
                    request_type=request_type,
                    name=name,
                    response_time=float(value),
                    response_length=0,
                    exception=None,
                    context={},
                )


if __name__ == "__main__":  # pragma: no cover - a reminder, not an entry point
    print("run with: python loadtest/run.py --help", file=sys.stderr)
    raise SystemExit(2)
