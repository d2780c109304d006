"""The metrics the shipped alert rules watch: rejections by attribute and rule, the last run's
outcome and shares, the browser backlog per country where the tasks really wait, live slot hosts and
distributors. Real Redis, a real batch through the worker's pipeline."""

from __future__ import annotations

import pytest
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.metrics import metrics_registry
from harvester.producer.quality import publish_run_quality
from harvester.redis_keys import PageSlotKeys, distributor_heartbeat
from harvester.scraping import FetchResult

from tests.metrics.helpers import scrape, value

pytestmark = pytest.mark.integration


def test_rejections_and_the_last_runs_outcome_are_metrics(write_source, redis_client, worker_settings, runner,
                                                          demo_site) -> None:
    registry = metrics_registry(redis_client, worker_settings)
    source = write_source("rejecting", attributes={"sku": {"css": ".sku", "required": True},
                                                    "stock": {"css": ".stock", "type": "int", "max": 3}})
    message = TaskMessage(source=source.name, url=f"{demo_site.url}/product/7", run_id="run-1")
    Intake(redis_client, worker_settings).push(source, [message])
    RateLimitStore(redis_client, worker_settings).admit(source.name, 1)
    page = FetchResult(message.url, "ok", status=200, text="<h1>no sku here</h1><span class=stock>9</span>",
                       content_type="text/html", elapsed=0.1)
    runner.finish(source, [message], [page])
    samples = scrape(registry)
    assert value(samples, "harvester_rejections_total", source=source.name, attribute="sku", rule="missing") == 1
    assert value(samples, "harvester_extraction_problems_total", source=source.name, attribute="stock",
                 kind="max") == 1

    publish_run_quality(redis_client, source.name, {
        "run_id": "run-1", "quality": {"outcome": "degraded", "breached": True, "on_breach": "warn", "reason": "x"},
        "shares": {"stored": 0.0, "rejected": 1.0, "dead": 0.0}})
    samples = scrape(registry)
    assert value(samples, "harvester_run_quality_breached", source=source.name, on_breach="warn") == 1
    assert value(samples, "harvester_run_outcome", source=source.name, outcome="degraded") == 1
    assert value(samples, "harvester_run_outcome", source=source.name, outcome="green") == 0
    assert value(samples, "harvester_run_share", source=source.name, kind="rejected") == 1.0


def test_the_browser_backlog_is_read_where_browser_tasks_wait(redis_client, worker_settings) -> None:
    registry = metrics_registry(redis_client, worker_settings)
    redis_client.rpush(PageSlotKeys().browser_tasks("SG"), "a", "b", "c")
    redis_client.set(distributor_heartbeat("one"), "1", ex=60)
    samples = scrape(registry)
    assert value(samples, "harvester_browser_tasks_waiting", country="SG") == 3
    assert value(samples, "harvester_distributors_alive") == 1
    assert value(samples, "harvester_slot_hosts") == 0 and value(samples, "harvester_slot_host_capacity") == 0
    redis_client.lpop(PageSlotKeys().browser_tasks("SG"))
    assert value(scrape(registry), "harvester_browser_tasks_waiting", country="SG") == 2
