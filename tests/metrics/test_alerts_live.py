"""The shipped alert rules in a real Prometheus (the Debian package), configured as `make run MODE=cluster`
configures it, scraping a real distributor: a run that breached its quality makes HarvestRunQualityBreached
fire, and the browser backlog a page-slot country waits with reaches Prometheus."""

from __future__ import annotations

import shutil
import time

import httpx
import pytest
import yaml
from harvester.producer.quality import publish_run_quality
from harvester.redis_keys import PageSlotKeys
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port
from harvester.services.prometheus import prometheus_service, write_prometheus_config

from tests.fixtures.servers import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="apt-get install prometheus")]


def test_a_breached_run_fires_its_alert_in_a_real_prometheus(configure_settings, redis_client, start_distributor,
                                                             tmp_path) -> None:
    metrics_port = free_port()
    configure_settings(metrics_port=metrics_port)
    start_distributor()
    readiness.wait_until(lambda: readiness.http_ok(f"http://{LOOPBACK}:{metrics_port}/metrics"), 20, "metrics")
    port = free_port()
    config_file = write_prometheus_config(tmp_path, metrics_port)
    service = prometheus_service(tmp_path, port, "PROMETHEUS_PORT", {})
    config = yaml.safe_load(config_file.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}  # the cluster's, sooner
    config_file.write_text(yaml.safe_dump(config))
    base_url = f"http://{LOOPBACK}:{port}"
    prometheus = ServerProcess("prometheus", service.command, tmp_path / "prometheus.log",
                               ready=lambda: readiness.http_ok(f"{base_url}/-/ready"))
    prometheus.start(timeout=60)
    try:
        rules = httpx.get(f"{base_url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        assert len([rule for group in rules for rule in group["rules"]]) == 9  # the shipped file, loaded

        redis_client.sadd("harvester:sources", "alerted")  # a known source, as a registration makes it
        publish_run_quality(redis_client, "alerted", {
            "run_id": "run-1", "shares": {"stored": 0.0, "rejected": 1.0, "dead": 0.0},
            "quality": {"outcome": "failed", "breached": True, "on_breach": "fail", "reason": "sku missing"}})
        redis_client.rpush(PageSlotKeys().browser_tasks("SG"), "task")

        def firing() -> list[dict]:
            alerts = httpx.get(f"{base_url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
            return [alert for alert in alerts if alert["state"] == "firing"
                    and alert["labels"]["alertname"] == "HarvestRunQualityBreached"]

        deadline = time.monotonic() + 60
        while not firing():
            assert time.monotonic() < deadline, httpx.get(f"{base_url}/api/v1/alerts", timeout=10).text
            time.sleep(1)
        assert firing()[0]["labels"]["source"] == "alerted"
        backlog = httpx.get(f"{base_url}/api/v1/query", timeout=10,
                            params={"query": 'max by (country) (harvester_browser_tasks_waiting)'}).json()
        assert {(entry["metric"]["country"], entry["value"][1]) for entry in backlog["data"]["result"]} == {("SG", "1")}
    finally:
        prometheus.stop()
