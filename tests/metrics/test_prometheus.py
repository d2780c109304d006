"""A real Prometheus (the Debian package) scrapes the distributor while a real Celery worker harvests,
and a PromQL query for a source's stored records returns the figure MongoDB holds."""

from __future__ import annotations

import json
import re
import shutil
import time

import httpx
import pytest
from harvester.distributor import Intake, TaskMessage
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import REPOSITORY_ROOT

from tests.fixtures.servers import ServerProcess
from tests.metrics.helpers import parse, value

DASHBOARD = REPOSITORY_ROOT / "deploy" / "grafana" / "dashboards" / "harvester.json"
pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="apt-get install prometheus")]


def query(base_url: str, promql: str) -> list[dict]:
    response = httpx.get(f"{base_url}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()
    return response.json()["data"]["result"]


def test_prometheus_scrapes_the_distributor(configure_settings, write_source, demo_site, mongo_server, redis_client,
                                            celery_worker_factory, start_distributor, tmp_path) -> None:
    metrics_port = free_port()
    settings = configure_settings(metrics_port=metrics_port)
    source = write_source("scraped", rate_limit={"max_active": 4, "per_minute": 10_000})
    celery_worker_factory(queues="default", concurrency=2)
    start_distributor()
    metrics_url = f"http://{LOOPBACK}:{metrics_port}/metrics"
    readiness.wait_until(lambda: readiness.http_ok(metrics_url), 20, "distributor metrics")

    prometheus_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: harvester-distributor\n    static_configs: [{{targets: ['{LOOPBACK}:{metrics_port}']}}]\n"
    )
    base_url = f"http://{LOOPBACK}:{prometheus_port}"
    prometheus = ServerProcess(
        "prometheus",
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address={LOOPBACK}:{prometheus_port}"],
        tmp_path / "prometheus.log", ready=lambda: readiness.http_ok(f"{base_url}/-/ready"))
    prometheus.start(timeout=60)
    try:
        pages = [TaskMessage(source=source.name, url=f"{demo_site.url}/product/{i}") for i in range(1, 31)]
        Intake(redis_client, settings).push(source, pages)
        collection = mongo_server.client()[settings.mongo_database][source.output_collection]
        deadline = time.monotonic() + 120
        while collection.count_documents({}) < len(pages):
            assert time.monotonic() < deadline, "the harvest did not finish"
            time.sleep(0.5)
        stored = collection.count_documents({})
        promql = f'max(harvester_records_stored_total{{source="{source.name}"}})'
        deadline = time.monotonic() + 60
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = query(base_url, promql)
            if result and float(result[0]["value"][1]) == stored:
                break
            time.sleep(1)
        assert result and float(result[0]["value"][1]) == stored == 30, result
        # the scrape target is healthy and the histograms arrived
        targets = httpx.get(f"{base_url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        assert [target["health"] for target in targets] == ["up"]
        count = query(base_url, f'harvester_fetch_seconds_count{{source="{source.name}"}}')
        assert float(count[0]["value"][1]) == 30
        direct = parse(httpx.get(metrics_url, timeout=10).text)
        assert value(direct, "harvester_requests_total", source=source.name, outcome="ok", status="200") == 30

        # every expression of the Grafana dashboard is valid PromQL over metrics the collector exports
        text = httpx.get(metrics_url, timeout=10).text
        families = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
        suffixes = ("total", "bucket", "sum", "count")
        exported = families | {f"{name}_{suffix}" for name in families for suffix in suffixes}
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                expression = target["expr"].replace("$source", ".*")
                response = httpx.get(f"{base_url}/api/v1/query", params={"query": expression}, timeout=10)
                assert response.json()["status"] == "success", (panel["title"], response.text)
                for metric in re.findall(r"\b(harvester_[a-z_]+)\b", expression):
                    assert metric in exported, (panel["title"], metric)
        # a rate() needs two samples of the series: poll until Prometheus has scraped it twice
        panel_expression = json.loads(DASHBOARD.read_text())["panels"][0]["targets"][0]["expr"]
        deadline = time.monotonic() + 30
        records_panel: list[dict] = []
        while time.monotonic() < deadline:
            records_panel = query(base_url, panel_expression.replace("$source", source.name))
            if records_panel:
                break
            time.sleep(1)
        assert [series["metric"]["source"] for series in records_panel] == [source.name]
    finally:
        prometheus.stop()
