"""A country's proxy pool end to end: a Celery slot host on `pageslots`, real Chromium, the distributor, MongoDB
and two `harvester forward-proxy` processes as the SG pool (``proxy_sg``, ``proxy_sg_2``); one is killed mid-run.
Every task is stored, none is dead-lettered, the dead proxy's failures are counted in the shared health, and the
pages after its death went through the living proxy."""

from __future__ import annotations

import pytest
from harvester.pageslots.proxy_pool import ProxyHealth
from harvester.pageslots.registry import SlotHosts
from harvester_demo.app import product_facts

from tests.pageslots.test_browser_pages import Slots, shape_settings  # noqa: F401 (the fixture is used by name)
from tests.pageslots.test_slot_hosting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_proxies_for_sg_one_killed_mid_run_every_task_stored_through_the_living_one(
        shape_settings, forward_proxy_factory, monkeypatch, demo_site, mongo_server, redis_client,  # noqa: F811
        celery_worker_factory, start_distributor) -> None:
    first, second = forward_proxy_factory("SG-1"), forward_proxy_factory("SG-2")
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", first.url)
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_2", second.url)
    start_distributor()
    celery_worker_factory(queues="pageslots", concurrency=2, name="pool2")
    wait_for(lambda: SlotHosts(redis_client).live_capacity().slots == 2, 30, lambda: "no capacity")
    slots = Slots(shape_settings, redis_client, mongo_server, demo_site)
    source = slots.source("pooled", retries=0)
    numbers = list(range(1, 41))
    slots.push(source, [f"/late/timer/{number}" for number in numbers])

    wait_for(lambda: len(slots.records(source)) >= 8, 120, lambda: f"{len(slots.records(source))} stored",
             between=slots.run_jobs)
    second_before = second.stats()["requests"]
    stored_before = len(slots.records(source))
    first.server.kill()
    slots.wait_settled([(source, len(numbers))], timeout=180)

    assert slots.dead(source) == []  # retries: 0, so a single charged failure would have dead-lettered a task
    records = {record["sku"]: record for record in slots.records(source)}
    assert sorted(records) == sorted(product_facts(number)["sku"] for number in numbers)
    health = ProxyHealth(redis_client).states("SG")
    assert health["proxy_sg"].errors >= 1  # the dead proxy's connect failures, each tried through proxy_sg_2
    assert health["proxy_sg_2"].errors == 0
    counters = slots.store.counters(source.name)
    assert 1 <= counters["outcome:proxy_error"] <= health["proxy_sg"].errors  # in the run's report, never a retry
    assert counters.get("outcome:connection_error", 0) == 0 and counters.get("outcome:timeout", 0) == 0
    in_flight = 2  # one page per slot may have been loaded through the dead proxy before its death
    assert second.stats()["requests"] - second_before >= len(numbers) - stored_before - in_flight
