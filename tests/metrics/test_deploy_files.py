"""deploy/: Prometheus and Grafana files that compose mounts are consistent with each other and valid."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit
DEPLOY = REPOSITORY_ROOT / "deploy"


def test_the_dashboard_uses_the_provisioned_datasource() -> None:
    datasources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasources["datasources"][0]["uid"]
    dashboard = json.loads((DEPLOY / "grafana/dashboards/harvester.json").read_text())
    panels = dashboard["panels"]
    assert len(panels) >= 12 and all(panel["datasource"]["uid"] == uid for panel in panels)
    assert all(target["datasource"]["uid"] == uid for panel in panels for target in panel["targets"])
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/harvester.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with the prometheus package")
def test_prometheus_config_is_valid() -> None:
    checked = subprocess.run(["promtool", "check", "config", str(DEPLOY / "prometheus/prometheus.yml")],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
