"""Static checks of docker/: compose files, Prometheus, Grafana provisioning, the Dockerfile and
.dockerignore. No Docker engine is needed (none exists where these tests run)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.ops.helpers import (
    DOCKER,
    REPO,
    Tagged,
    dockerfile_instructions,
    dockerignore_patterns,
    excluded,
    load_yaml,
)

COMPOSE = DOCKER / "compose.yaml"
COMPOSE_CPU = DOCKER / "compose.cpu.yaml"
SERVICE = "attnserve"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = load_yaml(COMPOSE)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose_cpu() -> dict[str, Any]:
    data = load_yaml(COMPOSE_CPU)
    assert isinstance(data, dict)
    return data


def _host_path(volume: str) -> Path | None:
    """The host side of a bind mount ``./x:/y[:ro]`` (None for named volumes)."""
    source = volume.split(":", 1)[0]
    if source.startswith((".", "/")):
        return (DOCKER / source).resolve()
    return None


def _container_port(compose: dict[str, Any]) -> int:
    env = compose["services"][SERVICE]["environment"]
    return int(env["ATTNSERVE_PORT"])


# ----------------------------------------------------------------------------- compose


def test_compose_files_parse_and_name_the_services(
    compose: dict[str, Any], compose_cpu: dict[str, Any]
) -> None:
    assert {SERVICE, "prometheus", "grafana"} <= set(compose["services"])
    assert set(compose_cpu["services"]) <= set(compose["services"])


def test_build_context_and_dockerfile_exist(compose: dict[str, Any]) -> None:
    build = compose["services"][SERVICE]["build"]
    context = (DOCKER / build["context"]).resolve()
    assert context == REPO
    dockerfile = context / build["dockerfile"]
    assert dockerfile.is_file()
    stages = {
        i.args.split()[-1] for i in dockerfile_instructions(dockerfile) if i.keyword == "FROM"
    }
    assert build["target"] in stages


def test_every_mounted_file_exists(compose: dict[str, Any]) -> None:
    mounts = 0
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            path = _host_path(volume)
            if path is not None:
                assert path.exists(), f"{name}: {volume} mounts a missing {path}"
                mounts += 1
            else:
                assert volume.split(":", 1)[0] in compose.get("volumes", {}), volume
    assert mounts >= 3


def test_service_reserves_one_gpu(compose: dict[str, Any]) -> None:
    devices = compose["services"][SERVICE]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert compose["services"][SERVICE]["environment"]["ATTNSERVE_DEVICE"] == "cuda"


def test_service_healthcheck_gates_the_monitoring_stack(compose: dict[str, Any]) -> None:
    services = compose["services"]
    check = services[SERVICE]["healthcheck"]["test"]
    assert check[0] == "CMD" and "/healthz" in check
    assert services["prometheus"]["depends_on"][SERVICE]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert "healthcheck" in services["prometheus"]
    # Draining (ATTNSERVE_SHUTDOWN_GRACE_S) must finish before compose kills the container.
    grace = float(services[SERVICE]["environment"]["ATTNSERVE_SHUTDOWN_GRACE_S"])
    assert float(services[SERVICE]["stop_grace_period"].removesuffix("s")) > grace


def test_service_listens_on_all_interfaces_on_the_published_port(compose: dict[str, Any]) -> None:
    service = compose["services"][SERVICE]
    assert service["environment"]["ATTNSERVE_HOST"] == "0.0.0.0"
    port = _container_port(compose)
    assert any(str(p).endswith(f":{port}") for p in service["ports"])


def test_cpu_override_drops_the_gpu_and_builds_cpu_torch(compose_cpu: dict[str, Any]) -> None:
    service = compose_cpu["services"][SERVICE]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert isinstance(devices, Tagged) and devices.tag == "!reset"
    assert service["environment"]["ATTNSERVE_DEVICE"] == "cpu"
    # Several processes on CPU (one tops out near one core); the GPU stack keeps one.
    assert service["environment"]["ATTNSERVE_WORKERS"].startswith("${ATTNSERVE_WORKERS:-")
    args = service["build"]["args"]
    assert args["TORCH_INDEX_URL"].rstrip("/").endswith("/cpu")
    assert "cuda" not in args["BASE_IMAGE"]
    assert service["image"] != "attnserve:cuda"


# ----------------------------------------------------------------------------- Prometheus


def test_prometheus_scrapes_the_service_by_compose_name_and_port(compose: dict[str, Any]) -> None:
    config = load_yaml(DOCKER / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs[SERVICE]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"{SERVICE}:{_container_port(compose)}"]
    mount = next(v for v in compose["services"]["prometheus"]["volumes"] if "prometheus.yml" in v)
    assert mount.split(":")[1] in compose["services"]["prometheus"]["command"][0]


# ----------------------------------------------------------------------------- Grafana


def test_grafana_datasource_points_at_prometheus(compose: dict[str, Any]) -> None:
    config = load_yaml(DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml")
    (source,) = config["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["uid"] == "prometheus"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"


def test_grafana_dashboard_provider_path_is_the_mounted_folder(compose: dict[str, Any]) -> None:
    config = load_yaml(DOCKER / "grafana" / "provisioning" / "dashboards" / "attnserve.yaml")
    (provider,) = config["providers"]
    path = provider["options"]["path"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    host = DOCKER / mounts[path]
    dashboards = sorted(host.glob("*.json"))
    assert [d.name for d in dashboards] == ["attnserve.json"]
    home = compose["services"]["grafana"]["environment"][
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"
    ]
    assert home == f"{path}/attnserve.json"


def test_dashboard_is_well_formed() -> None:
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "attnserve.json").read_text())
    assert dashboard["uid"] == "attnserve"
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= variables, (panel["title"], used - variables)


# ----------------------------------------------------------------------------- Dockerfile


@pytest.fixture(scope="module")
def dockerfile() -> list[Any]:
    return dockerfile_instructions(DOCKER / "Dockerfile")


def test_dockerfile_is_multi_stage(dockerfile: list[Any]) -> None:
    froms = [i for i in dockerfile if i.keyword == "FROM"]
    assert len(froms) >= 2
    names = [f.args.split()[-1] for f in froms]
    assert names[-1] == "runtime" and "builder" in names
    final = len(froms) - 1
    copies = [i.args for i in dockerfile if i.stage == final and i.keyword == "COPY"]
    assert any("--from=builder" in c and "/opt/venv" in c for c in copies)


def test_runtime_stage_has_no_build_tools(dockerfile: list[Any]) -> None:
    final = max(i.stage for i in dockerfile)
    runs = " ".join(i.args for i in dockerfile if i.stage == final and i.keyword == "RUN")
    for tool in ("build-essential", "gcc", "g++", "python3-dev", "python3.12-dev", "git", "curl"):
        assert not re.search(rf"(?<![\w.-]){re.escape(tool)}(?![\w.-])", runs), tool
    assert "pip install" not in runs


def test_dockerfile_runs_as_non_root_with_a_healthcheck(dockerfile: list[Any]) -> None:
    final = max(i.stage for i in dockerfile)
    users = [i.args for i in dockerfile if i.stage == final and i.keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    assert users[-1].split(":")[0] not in ("root", "0")
    (health,) = [i.args for i in dockerfile if i.stage == final and i.keyword == "HEALTHCHECK"]
    assert "/healthz" in health
    assert "attnserve-healthcheck" in health
    copies = " ".join(i.args for i in dockerfile if i.keyword == "COPY")
    assert "docker/healthcheck.py" in copies and (DOCKER / "healthcheck.py").is_file()


def test_dockerfile_serves_one_process(dockerfile: list[Any]) -> None:
    final = max(i.stage for i in dockerfile)
    entry = next(i.args for i in dockerfile if i.stage == final and i.keyword == "ENTRYPOINT")
    cmd = next(i.args for i in dockerfile if i.stage == final and i.keyword == "CMD")
    assert json.loads(entry) + json.loads(cmd) == ["attnserve", "serve"]
    assert "--workers" not in entry + cmd


def _arg_default(dockerfile: list[Any], name: str) -> str:
    for i in dockerfile:
        if i.keyword == "ARG" and i.args.startswith(f"{name}="):
            return i.args.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}=...")


def test_torch_build_is_in_the_project_range(dockerfile: list[Any]) -> None:
    version = _arg_default(dockerfile, "TORCH_VERSION")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["dependencies"] if d.startswith("torch")]
    low, high = re.fullmatch(r"torch>=([\d.]+),<([\d.]+)", spec.replace(" ", "")).groups()  # type: ignore[union-attr]

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    assert key(low) <= key(version) < key(high)
    index = _arg_default(dockerfile, "TORCH_INDEX_URL")
    assert re.search(r"/whl/cu12\d$", index), index
    base = _arg_default(dockerfile, "BASE_IMAGE")
    assert base.startswith("nvidia/cuda:12.") and "runtime" in base


def test_dockerfile_copies_only_what_the_context_keeps(dockerfile: list[Any]) -> None:
    patterns = dockerignore_patterns(REPO / ".dockerignore")
    for instruction in dockerfile:
        if instruction.keyword != "COPY" or "--from=" in instruction.args:
            continue
        sources = [a for a in instruction.args.split() if not a.startswith("--")][:-1]
        for source in sources:
            assert (REPO / source).exists(), source
            assert not excluded(patterns, source), f"{source} is excluded by .dockerignore"


def test_dockerignore_keeps_package_data_and_drops_the_rest() -> None:
    patterns = dockerignore_patterns(REPO / ".dockerignore")
    kept = [
        "pyproject.toml",
        "README.md",
        "service/app.py",
        "models/informer/model.py",
        "models/weights/informer-etth1-h24/model.safetensors",
        "models/weights/informer-etth1-h24/config.json",
        "docker/healthcheck.py",
    ]
    dropped = [
        ".venv/bin/python",
        ".git/HEAD",
        "runs/etth1/log.txt",
        "benchmarks/results/attention.json",
        "tests/unit/test_x.py",
        "loadtest/results/ci/report.html",
        "service/__pycache__/app.cpython-312.pyc",
        ".pytest_cache/v/cache",
        ".mypy_cache/3.11/x.json",
        "attnserve.egg-info/PKG-INFO",
        "docker/compose.yaml",
    ]
    assert [p for p in kept if excluded(patterns, p)] == []
    assert [p for p in dropped if not excluded(patterns, p)] == []


# Issue 37: the image builds on any Debian or Ubuntu base and with the classic builder.


def test_dockerfile_uses_the_base_images_python3(dockerfile: list[Any]) -> None:
    # A versioned package name (python3.12) exists on one base only; the venv made in the builder
    # must run on the runtime stage's interpreter, so both install the base's python3.
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert not re.search(r"python3\.\d+", text)
    for stage in {i.stage for i in dockerfile if i.keyword == "FROM"}:
        runs = " ".join(i.args for i in dockerfile if i.stage == stage and i.keyword == "RUN")
        assert re.search(r"apt-get install [^&]*(?<![\w.-])python3(?![\w.])", runs), stage
    builder = " ".join(i.args for i in dockerfile if i.stage == 0 and i.keyword == "RUN")
    assert next(i.args.split()[-1] for i in dockerfile if i.keyword == "FROM") == "builder"
    assert "python3 -m venv /opt/venv" in builder


def test_dockerfile_builds_with_the_classic_builder(dockerfile: list[Any]) -> None:
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    # Parser directives (a frontend to pull, BuildKit only) stand in the file's leading comments.
    assert not re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE)
    # BuildKit-only flags: COPY/ADD --chmod and --link, RUN --mount, --network and --security.
    for instruction in dockerfile:
        for flag in ("--chmod", "--link", "--mount", "--network", "--security"):
            assert flag not in instruction.args, f"{instruction.keyword} {instruction.args}"
        assert not instruction.args.lstrip().startswith("<<"), "heredocs need BuildKit"


def test_healthcheck_probe_is_made_executable_in_the_image(dockerfile: list[Any]) -> None:
    final = max(i.stage for i in dockerfile)
    runs = " ".join(i.args for i in dockerfile if i.stage == final and i.keyword == "RUN")
    assert re.search(r"chmod 0?755 /usr/local/bin/attnserve-healthcheck", runs)
