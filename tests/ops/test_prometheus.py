"""A real Prometheus (Debian's ``prometheus`` package) scrapes a real attnserve under load, loads
the shipped alerting rules, and answers **every Grafana panel's query** with data.

The Prometheus config is the compose stack's ``docker/prometheus/prometheus.yml`` with its
targets pointed at the local server and a 1-second scrape interval; the dashboard's template
variables are set to match everything and ``$__rate_interval`` to 30 s. Grafana itself is not
run (its rendering is checked statically in test_docker_config.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml

from tests.ops.helpers import ALERTS, DOCKER, prometheus_binary
from tests.service.helpers import hourly_series
from tests.service.server_process import ServerProcess
from tests.utils.live_server import free_port

DASHBOARD = DOCKER / "grafana" / "dashboards" / "attnserve.json"
KEY = "prometheus-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}
FORECASTER = "informer-etth1-h24"
# Panels that can hold no data on a CPU server, and why (asserted empty there, so a change that
# makes them report shows up here).
EMPTY_ON_CPU = {
    "Per-batch peak device memory (p50 / max bucket)": "the CUDA allocator's peak per batch",
}


# (path, attention, status) of each request the tests sent.
Sent = Counter[tuple[str, str, str]]


@dataclass
class Stack:
    server: ServerProcess
    prometheus: str  # base URL
    sent: Sent  # every model request the load sent, as the clients saw them answered

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def prometheus_config(server_port: int, prometheus_port: int) -> dict[str, Any]:
    """The compose stack's config, aimed at this machine, scraping every second."""
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(DOCKER / "prometheus" / name) for name in config["rule_files"]]
    targets = {"attnserve": server_port, "prometheus": prometheus_port}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{targets[job['job_name']]}"]}]
    return config


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binary = prometheus_binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    server = ServerProcess(
        tmp / "attnserve.log",
        ["all-MiniLM-L6-v2", FORECASTER],
        ["--api-key", KEY, "--max-batch-size", "8"],
    )
    port = free_port()
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(server.port, port)))
    log = (tmp / "prometheus.log").open("w")
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        server.wait_ready()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert prometheus.poll() is None, (tmp / "prometheus.log").read_text()
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Prometheus not ready in 60 s"
            time.sleep(0.2)
        stack = Stack(server, url, send_load(server.url))
        wait_for_scrapes(stack, sent_by=time.time())
        yield stack
    finally:
        prometheus.kill()
        prometheus.wait(10)
        log.close()
        server.stop()


def send_load(url: str, seconds: float = 8.0) -> Sent:
    """Eight clients for ``seconds``: embeddings and forecasts under several backends, plus
    the errors a dashboard must show (a 422 and an unauthenticated 401). Returns what was sent
    and how each was answered."""
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("/encode", {"inputs": ["a short text", "and another one"], "attention": b})
        for b in ("flash", "full", "performer")
    ] + [
        ("/forecast", {"model": FORECASTER, "series": [hourly_series(96)], "attention": b})
        for b in ("flash", "nystrom")
    ]
    stop_at = time.monotonic() + seconds

    def client(k: int) -> Sent:
        sent: Sent = Counter()
        with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
            i = k
            while time.monotonic() < stop_at:
                path, body = bodies[i % len(bodies)]
                status = c.post(path, json=body).status_code
                sent[path, body["attention"], str(status)] += 1
                i += 1
        return sent

    with ThreadPoolExecutor(8) as pool:
        sent = sum(pool.map(client, range(8)), Counter())
    assert sent and {status for _, _, status in sent} == {"200"}, sent
    with httpx.Client(base_url=url, timeout=30) as c:
        assert c.post("/encode", json={"inputs": []}, headers=AUTH).status_code == 422
        sent["/encode", "", "422"] += 1
        assert c.post("/encode", json={"inputs": ["no key"]}).status_code == 401
        sent["/encode", "", "401"] += 1
    return sent


def wait_for_scrapes(stack: Stack, sent_by: float, timeout: float = 30.0) -> None:
    """Until Prometheus holds the load's last requests: its latest successful scrape of the
    server came two scrape intervals after ``sent_by`` (the wall-clock time the last request was
    answered; the server counts it just after answering, and rates need two scrapes after it),
    and it holds ten scrapes in all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # A sample's timestamp is the time of the scrape that took it (failed scrapes take none).
        scraped = stack.query('timestamp(attnserve_ready{job="attnserve"})')
        scrapes = stack.query('count_over_time(up{job="attnserve"}[30s])')
        if (
            scraped
            and float(scraped[0]["value"][1]) >= sent_by + 2.0
            and scrapes
            and float(scrapes[0]["value"][1]) >= 10
        ):
            return
        time.sleep(0.5)
    raise AssertionError("Prometheus did not scrape the server in time")


def panel_queries() -> list[tuple[str, str]]:
    """Every (panel title, PromQL) of the dashboard, template variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "30s")
            for variable in ("instance", "endpoint", "model", "attention", "precision"):
                expr = expr.replace(f"${variable}", ".*")
            assert "$" not in expr, f"unfilled variable in {panel['title']!r}: {expr}"
            queries.append((panel["title"], expr))
    return queries


def test_the_server_is_scraped_and_healthy(stack: Stack) -> None:
    up = stack.query('up{job="attnserve"}')
    assert [float(s["value"][1]) for s in up] == [1.0]
    assert float(stack.query("attnserve_ready")[0]["value"][1]) == 1.0


def test_every_dashboard_panel_returns_data(stack: Stack) -> None:
    queries = panel_queries()
    assert len(queries) >= 30
    empty, unexpected = [], []
    for title, expr in queries:
        result = stack.query(expr)
        if title in EMPTY_ON_CPU:
            if result:
                unexpected.append(title)
        elif not result:
            empty.append(f"{title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert not unexpected, f"now report on CPU (drop them from EMPTY_ON_CPU): {unexpected}"


def test_request_counts_match_what_was_sent(stack: Stack) -> None:
    # The server is this module's own and only the load asked it for models: apart from the
    # probes and Prometheus' own scrapes, its counters hold exactly what the clients saw answered.
    models = 'attnserve_requests_total{endpoint!~"/metrics|/readyz|/healthz"}'
    by_status = {
        s["metric"]["status"]: float(s["value"][1])
        for s in stack.query(f"sum by (status) ({models})")
    }
    sent_by_status: Counter[str] = Counter()
    for (_, _, status), n in stack.sent.items():
        sent_by_status[status] += n
    assert by_status == {status: float(n) for status, n in sent_by_status.items()}
    # Each answered request under its endpoint and the backend it asked for.
    answered = {
        (s["metric"]["endpoint"], s["metric"]["attention"]): float(s["value"][1])
        for s in stack.query(f'sum by (endpoint, attention) ({models[:-1]}, status="200"}})')
    }
    assert answered == {
        (path, attention): float(n)
        for (path, attention, status), n in stack.sent.items()
        if status == "200"
    }
    # The 401 is also the one unauthorized rejection.
    (unauthorized,) = stack.query('attnserve_rejections_total{reason="unauthorized"}')
    assert float(unauthorized["value"][1]) == 1.0


def test_the_alerting_rules_load_and_none_fire_on_a_healthy_server(stack: Stack) -> None:
    r = httpx.get(f"{stack.prometheus}/api/v1/rules", timeout=10).json()
    rules = [rule for group in r["data"]["groups"] for rule in group["rules"]]
    assert sorted(rule["name"] for rule in rules) == sorted(ALERTS)
    assert all(rule["health"] == "ok" for rule in rules), rules
    assert all(rule["state"] == "inactive" for rule in rules), rules
