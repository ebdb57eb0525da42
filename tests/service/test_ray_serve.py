"""attnserve on Ray Serve, on a local Ray cluster this module starts and stops: two replicas both
serve; every replica's metrics on any ``/metrics``, labelled by replica; a replica killed under
load costs only its in-flight requests and is replaced; an application whose models fail to
load never takes traffic; the config files are well formed."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray  # the [ray] extra, which the dev extra (`make install`) includes
import yaml
from prometheus_client.parser import text_string_to_metric_families
from ray import serve

from service.runtime.ray_metrics import merge
from service.runtime.ray_serve import APP_NAME, application, deployment_options
from service.settings import Settings
from tests.service.helpers import hourly_series, wait_until

ROOT = Path(__file__).resolve().parents[2]
MODEL = "informer-etth1-h24"  # shipped, small: each replica loads it in about a second


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster with Serve on a free port; its URL."""
    port = free_port()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "models": [MODEL],
        "device": "cpu",
        "torch_threads": 1,
        "replicas": 2,
        "shutdown_grace_s": 5.0,
        "body_parse_processes": 0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def url(cluster: str) -> str:
    serve.run(application(settings()), name=APP_NAME, route_prefix="/", blocking=False)
    return cluster


def forecast(client: httpx.Client) -> httpx.Response:
    return client.post("/forecast", json={"model": MODEL, "series": [hourly_series(96)]})


def replicas_seen(url: str, n: int = 40) -> Counter[str]:
    with httpx.Client(base_url=url, timeout=30) as c:
        return Counter(forecast(c).headers["x-replica"] for _ in range(n))


def test_two_replicas_both_serve_the_same_api(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as c:
        assert c.get("/readyz").json()["status"] == "ready"
        r = forecast(c)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == MODEL and len(r.json()["forecasts"][0]["values"]) == 24
        bad = c.post("/forecast", json={"model": MODEL, "series": [], "attention": "nope"})
        assert bad.status_code == 422 and "error" in bad.json()
    seen = replicas_seen(url)
    assert len(seen) == 2, seen


def requests_by_replica(url: str, **labels: str) -> tuple[str, dict[str, float]]:
    """One ``/metrics`` scrape: the replica that answered it, and its ``attnserve_requests_total``
    samples that carry ``labels``, summed per ``replica`` label ("" for a sample without one)."""
    r = httpx.get(f"{url}/metrics", timeout=30)
    assert r.status_code == 200, r.text
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            if sample.name == "attnserve_requests_total" and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                replica = sample.labels.get("replica", "")
                counts[replica] = counts.get(replica, 0.0) + sample.value
    return r.headers["x-replica"], counts


def test_any_metrics_scrape_shows_every_replica_labelled(url: str) -> None:
    # Only this test asks for performer, so the series it reads hold its own requests whatever
    # ran before; the difference from a scrape taken first covers a rerun on the same cluster.
    labels = {"endpoint": "/forecast", "attention": "performer", "status": "200"}
    _, before = requests_by_replica(url, **labels)
    seen: Counter[str] = Counter()
    with httpx.Client(base_url=url, timeout=30) as c:
        body = {"model": MODEL, "series": [hourly_series(96)], "attention": "performer"}
        while len(seen) < 2 or min(seen.values()) < 5:
            assert seen.total() < 200, f"Ray sent 200 requests to {dict(seen)}"
            r = c.post("/forecast", json=body)
            assert r.status_code == 200, r.text
            seen[r.headers["x-replica"]] += 1
    sent = {replica: float(n) for replica, n in seen.items()}

    # Replicas push every 2 s: within a few pushes, a scrape answered by either replica holds
    # both replicas' requests, each under its own replica label, counted once.
    exact_from: set[str] = set()
    last: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while exact_from != set(sent):
        assert time.monotonic() < deadline, (
            f"scrapes answered by {sorted(exact_from)} matched; last counts {last}, sent {sent}"
        )
        answerer, counts = requests_by_replica(url, **labels)
        last = {r: counts[r] - before.get(r, 0.0) for r in counts if counts[r] != before.get(r)}
        # Counters only grow: a count over what was sent, or under another label, never heals.
        assert all(last[r] <= sent.get(r, 0.0) for r in last), f"counts {last}, sent {sent}"
        if last == sent:
            exact_from.add(answerer)
        time.sleep(0.2)


def test_merge_labels_each_replicas_samples() -> None:
    one = '# HELP x_total X.\n# TYPE x_total counter\nx_total{a="1"} 3.0\n'
    two = '# HELP x_total X.\n# TYPE x_total counter\nx_total{a="1"} 5.0\n'
    text = merge({"r1": one, "r2": two}).decode()
    assert text.count("# TYPE x_total counter") == 1
    assert 'x_total{a="1",replica="r1"} 3.0' in text
    assert 'x_total{a="1",replica="r2"} 5.0' in text


def test_a_killed_replica_costs_only_its_in_flight_requests_and_is_replaced(url: str) -> None:
    before = set(replicas_seen(url, 20))
    assert len(before) == 2
    clients, outcomes, stop = 4, [], threading.Event()
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while not stop.is_set():
                try:
                    r = forecast(c)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                with lock:
                    outcomes.append(ok)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(outcomes) >= 20, timeout=60)
        victim = next(
            a
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#")
        )
        ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=True)
        killed_at = len(outcomes)
        wait_until(lambda: len(outcomes) >= killed_at + 40, timeout=120)
    finally:
        stop.set()
        for t in threads:
            t.join()
    failures = outcomes.count(False)
    # Each client has one request in flight at a time: at most that many die with the replica.
    assert failures <= clients, f"{failures} failures for {clients} clients"
    # The failures are the killed replica's in-flight requests, which may be reported after
    # later requests succeed: what must hold is that serving goes on, so ask again now.
    with httpx.Client(base_url=url, timeout=60) as c:
        assert all(forecast(c).status_code == 200 for _ in range(20))

    # Ray starts a replacement; capacity returns: two replicas serve again, one of them new.
    def two_again() -> bool:
        return len(replicas_seen(url, 20)) == 2

    wait_until(two_again, timeout=180)
    after = set(replicas_seen(url, 30))
    assert len(after) == 2 and after != before


def test_an_application_whose_models_fail_to_load_never_takes_traffic(cluster: str) -> None:
    broken = application(settings(models=["no-such-model"], replicas=1))
    try:
        with pytest.raises(RuntimeError):
            serve.run(broken, name="broken", route_prefix="/broken", blocking=True)
        r = httpx.get(f"{cluster}/broken/healthz", timeout=30)
        assert r.status_code in (404, 503) and "x-replica" not in r.headers
    finally:
        serve.delete("broken")  # a failed check leaves no application behind for later tests


def test_deployment_options_follow_the_settings() -> None:
    fixed = deployment_options(settings(replicas=3, torch_threads=2), gpu=False)
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    assert fixed["ray_actor_options"] == {"num_cpus": 2}
    assert fixed["graceful_shutdown_timeout_s"] == 5.0
    auto = deployment_options(settings(replicas=0, max_replicas=6), gpu=True)
    assert auto["ray_actor_options"] == {"num_gpus": 1}
    assert auto["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 6,
        "target_ongoing_requests": 32,
    }
    assert auto["max_ongoing_requests"] == Settings().max_queue + 32


def test_serve_config_and_rayservice_name_the_same_application() -> None:
    config = yaml.safe_load((ROOT / "docker/ray/serve.yaml").read_text())
    service = yaml.safe_load((ROOT / "docker/kuberay/rayservice.yaml").read_text())
    assert service["apiVersion"] == "ray.io/v1" and service["kind"] == "RayService"
    embedded = yaml.safe_load(service["spec"]["serveConfigV2"])
    for cfg in (config, embedded):
        (app,) = cfg["applications"]
        assert app["import_path"] == "service.runtime.ray_serve:app_builder"
        Settings(**app["args"])  # every arg is a valid setting
    assert embedded["applications"][0]["args"]["device"] == "cuda"
    cluster_spec = service["spec"]["rayClusterConfig"]
    assert cluster_spec["enableInTreeAutoscaling"] is True
    assert cluster_spec["rayVersion"].split(".")[0] == ray.__version__.split(".")[0]
    (gpu,) = cluster_spec["workerGroupSpecs"]
    container = gpu["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["minReplicas"] <= gpu["maxReplicas"]
    assert cluster_spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    # Both pods run the image the Dockerfile builds with the ray extra.
    images = {
        container["image"],
        cluster_spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"],
    }
    assert images == {"attnserve:ray"}
    assert "EXTRAS=ray" in (ROOT / "docker/Dockerfile").read_text()


def test_cli_serve_ray_flags_parse() -> None:
    from service.cli import build_parser

    args = build_parser().parse_args(["serve", "--ray", "--replicas", "2"])
    assert Settings(ray=args.ray, replicas=args.replicas).ray is True
    assert Settings(ray=build_parser().parse_args(["serve", "--ray", "false"]).ray).ray is False
