"""Prometheus for ``make run MODE=cluster``: the Debian package's server with the rules compose ships.

The configuration is compose's ``deploy/prometheus/prometheus.yml`` with the distributor's address of this
machine and the alert rules (``deploy/prometheus/alerts.yml``) by absolute path, written into the cluster's
directory at each start, so what users run is what the compose Prometheus and the rule tests load.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import yaml

from harvester.services import readiness
from harvester.services.launcher import Service
from harvester.services.ports import LOOPBACK
from harvester.settings import REPOSITORY_ROOT

DEPLOY = REPOSITORY_ROOT / "deploy" / "prometheus"
ALERT_RULES = DEPLOY / "alerts.yml"
DISTRIBUTOR_JOB = "harvester-distributor"


def prometheus_config(metrics_targets: list[str], rules: Path = ALERT_RULES) -> dict:
    """Compose's configuration with these scrape targets and the rules file at ``rules``."""
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["rule_files"] = [str(rules)]
    for job in config["scrape_configs"]:
        if job["job_name"] == DISTRIBUTOR_JOB:
            job["static_configs"] = [{"targets": metrics_targets}]
    return config


def write_prometheus_config(base_dir: Path, metrics_port: int) -> Path:
    """The configuration file the service reads: compose's, scraping the distributor on ``metrics_port``."""
    directory = base_dir / "prometheus"
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config([f"{LOOPBACK}:{metrics_port}"]), sort_keys=False))
    return config


def prometheus_service(base_dir: Path, port: int, port_variable: str, env: Mapping[str, str]) -> Service:
    """The Prometheus service; its configuration is :func:`write_prometheus_config`'s (written at the start)."""
    directory = base_dir / "prometheus"
    config = directory / "prometheus.yml"
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    return Service("prometheus", [[binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
                                   f"--web.listen-address={LOOPBACK}:{port}", "--storage.tsdb.retention.time=15d"]],
                   env, port=port, port_variable=port_variable, ready_timeout=60, directories=(directory / "data",),
                   ready=lambda: readiness.http_ok(f"http://{LOOPBACK}:{port}/-/ready"))
