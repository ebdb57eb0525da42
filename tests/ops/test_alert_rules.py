"""The alerting rules shipped with the compose stack: valid for Prometheus (``promtool check
rules``), and each alert fires on a synthetic incident and resolves after it (``promtool test
rules``, the cases in ``docker/prometheus/alerts.test.yml``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.ops.helpers import ALERTS, DOCKER, prometheus_binary

RULES = DOCKER / "prometheus" / "alerts.yml"
RULE_TESTS = DOCKER / "prometheus" / "alerts.test.yml"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_rules_pass_promtool_check() -> None:
    done = promtool("check", "rules", str(RULES), cwd=DOCKER)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert {rule["alert"] for group in groups for rule in group["rules"]} == ALERTS


def test_every_alert_fires_and_resolves_in_the_unit_tests() -> None:
    done = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired, resolved = set(), set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else resolved).add(check["alertname"])
    assert fired == ALERTS and resolved == ALERTS


def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    # A wrong expectation must make promtool fail: the suite above is not vacuous.
    shutil.copy(RULES, tmp_path / RULES.name)
    broken = RULE_TESTS.read_text().replace("11.76%", "12.34%")
    assert broken != RULE_TESTS.read_text()
    (tmp_path / RULE_TESTS.name).write_text(broken)
    done = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0


def test_prometheus_config_loads_the_rules() -> None:
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == [RULES.name]
    done = promtool("check", "config", "prometheus.yml", cwd=DOCKER / "prometheus")
    assert done.returncode == 0, done.stdout + done.stderr
