"""The shipped alert rules: valid for promtool, unit-tested rule by rule (deploy/prometheus/
alerts.test.yml), every rule tested, loaded by compose and by `make run MODE=cluster`, and a test that a wrong
expectation fails (so the unit tests can fail)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from harvester.settings import REPOSITORY_ROOT

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with the prometheus package")]
DEPLOY = REPOSITORY_ROOT / "deploy" / "prometheus"


def promtool(*arguments: str, cwd: Path = DEPLOY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *arguments], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_rules_check_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0 and "SUCCESS: 9 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_has_a_unit_test_that_fires_it() -> None:
    rules = {rule["alert"] for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]
             for rule in group["rules"]}
    tests = yaml.safe_load((DEPLOY / "alerts.test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert rules == fired, rules ^ fired
    assert rules == quiet, f"rules without a case where they stay quiet: {rules - quiet}"


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    shutil.copy(DEPLOY / "alerts.yml", tmp_path / "alerts.yml")
    tests = yaml.safe_load((DEPLOY / "alerts.test.yml").read_text())
    tests["tests"][0]["alert_rule_test"][0]["exp_alerts"] = []  # the breached run, said not to fire
    (tmp_path / "alerts.test.yml").write_text(yaml.safe_dump(tests))
    assert promtool("test", "rules", "alerts.test.yml", cwd=tmp_path).returncode != 0


def test_compose_and_the_cluster_load_the_rules(tmp_path: Path) -> None:
    from harvester.services.cluster import Cluster, ClusterPorts

    compose = yaml.safe_load((REPOSITORY_ROOT / "docker-compose.yaml").read_text())
    volumes = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in volumes
    assert yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["rule_files"] == ["alerts.yml"]

    cluster = Cluster(tmp_path / "cluster", ClusterPorts(), mongo_uri="mongodb://127.0.0.1:1/",
                      demo_site_url="http://127.0.0.1:2", environ={"PATH": "/usr/bin"})
    from harvester.services.prometheus import write_prometheus_config

    written = write_prometheus_config(cluster.base_dir, ClusterPorts().metrics)  # what Cluster.start writes
    services = {service.name: service for service in cluster.all_services()}
    prometheus = services["prometheus"]
    config_file = Path(next(arg for arg in prometheus.command if arg.startswith("--config.file=")).split("=", 1)[1])
    assert config_file == written
    config = yaml.safe_load(config_file.read_text())
    assert config["rule_files"] == [str(DEPLOY / "alerts.yml")]
    assert config["scrape_configs"][0]["static_configs"] == [{"targets": [f"127.0.0.1:{ClusterPorts().metrics}"]}]
    assert services["distributor"].env["HARVESTER_METRICS_PORT"] == str(ClusterPorts().metrics)
    checked = promtool("check", "config", str(config_file))
    assert checked.returncode == 0, checked.stdout + checked.stderr
