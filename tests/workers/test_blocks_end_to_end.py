"""A site whose WAF starts challenging, end to end against real Redis, MongoDB and the demo site: runs are
planned, produced, worked through the worker's batch pipeline and reported as the report task does.

A source with only optional attributes harvests 100 items; then the site answers a client past N requests a
window with a challenge page (200, and 403): the same 100 are harvested again. No stored value is overwritten
with null, the blocks are counted and retried, the host slows down, all 100 are right once the site relents,
and a run that ends with items still blocked is not green.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from harvester.config import RunOptions, SourceConfig
from harvester.producer.planner import Planner, PlanOptions
from harvester.producer.producer import Producer
from harvester.producer.progress import RunSettlement
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings
from harvester.storage import RunStore
from harvester_demo.app import product_facts

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ITEMS = 100
ATTRIBUTES = ("title", "price", "stock")


@pytest.fixture
def worker_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    """Short windows, so a site that challenges past N requests a (3 s) window is a test of seconds."""
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=30,
                              rate_window_seconds=3, rate_window_margin_seconds=0.2, block_window_seconds=3,
                              block_pause_after=8, block_pause_seconds=1, host_rate_max_wait_seconds=20)


def wall(site, **knobs: Any) -> dict[str, Any]:
    query = "&".join(f"{name}={value}" for name, value in knobs.items())
    request = urllib.request.Request(f"{site.url}/_challenge?{query}", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def challenged(site) -> int:
    with urllib.request.urlopen(f"{site.url}/_challenge", timeout=10) as response:
        return json.load(response)["challenged"]


def start(source: SourceConfig, run_id: str, settings, mongo_server, redis_client) -> RunSettlement:
    database = mongo_server.client()[settings.mongo_database]
    Planner(database, None, database).plan(source, run_id, PlanOptions.for_source(source))
    produced = Producer.from_settings(settings, database, redis_client).produce(source, run_id)
    RunStore(database).record_produce(source.name, run_id, produced.to_dict())
    return RunSettlement(database, database, redis_client)


def work(source: SourceConfig, run_id: str, settlement: RunSettlement, crawl, timeout: float = 150,
         relent: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Work the run until it is complete (``relent`` is asked between steps, so the site can give up its wall),
    then its report with the quality verdict."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if relent is not None and relent():
            relent = None
        if crawl.step(source, 8) is None:
            if settlement.settle_and_measure(source.name, source.output_collection, run_id).complete:
                break
            time.sleep(0.1)
    else:
        pytest.fail(f"run {run_id} did not finish: {crawl.store.stats([source.name])}")
    return settlement.report(source.name, source.output_collection, run_id, attributes=source.record_attributes,
                             drift_threshold=source.drift_threshold, quality=RunOptions.for_run(source, {}).quality)


def stored(mongo_server, settings, source: SourceConfig) -> dict[str, dict[str, Any]]:
    collection = mongo_server.client()[settings.mongo_database][source.output_collection]
    return {document["url"]: document for document in collection.find({})}


def assert_right(records: dict[str, dict[str, Any]], site, items: range) -> None:
    """Every item's values are the site's facts: none is null, none was overwritten by a challenge page."""
    wrong = {}
    for number in items:
        facts, record = product_facts(number), records.get(f"{site.url}/product/{number}")
        if record is None or any(record[name] != facts[name] for name in ATTRIBUTES):
            wrong[number] = record and {name: record[name] for name in ATTRIBUTES}
    assert wrong == {}, f"{len(wrong)} items wrong or missing, e.g. {list(wrong.items())[:3]}"


@pytest.fixture
def shop(write_source, demo_site):
    seeds = [f"{demo_site.url}/product/{n}" for n in range(1, ITEMS + 1)]
    source = write_source(
        "walled_shop", input={"kind": "details", "seeds": seeds},
        listing=None, harvesting_lag=0, retries=12, batch={"size": ITEMS, "max_packages": 1},
        rate_limit={"max_active": 8, "per_minute": 100_000},
        attributes={"title": {"css": "h1.title"}, "price": {"css": ".price", "type": "float"},
                    "stock": {"css": ".stock", "type": "int"}})
    assert not any(attribute.required for attribute in source.attributes.values())
    yield source
    wall(demo_site)  # the session's site is shared: its wall comes down whatever happened


def test_a_site_that_starts_challenging_never_costs_a_stored_value(shop, demo_site, worker_settings, mongo_server,
                                                                   redis_client, crawl) -> None:
    first = work(shop, "run-1", start(shop, "run-1", worker_settings, mongo_server, redis_client), crawl)
    assert first["records_stored"] == ITEMS and first["quality"]["outcome"] == "green", first["quality"]
    assert_right(stored(mongo_server, worker_settings, shop), demo_site, range(1, ITEMS + 1))

    # the WAF: 12 requests a 3 s window, then "Just a moment..." with status 200; it relents after 30 challenges
    # (the site is the session's: its count of challenges includes earlier tests', which must not make it relent)
    before = challenged(demo_site)
    wall(demo_site, after=12, window=3, status=200)
    settlement = start(shop, "run-2", worker_settings, mongo_server, redis_client)
    second = work(shop, "run-2", settlement, crawl,
                  relent=lambda: challenged(demo_site) - before >= 30 and bool(wall(demo_site)))
    records = stored(mongo_server, worker_settings, shop)
    assert_right(records, demo_site, range(1, ITEMS + 1))  # 0 values overwritten with null, all 100 right
    # the site served 30 challenges before it relented; the pages the workers had in flight when it did may come
    # clean, so a few of those 30 are never seen as blocks
    assert second["records_stored"] == ITEMS and second["pages_blocked"] >= 20, second
    assert second["quality"]["outcome"] == "green", second["quality"]
    counters = redis_client.hgetall(SourceKeys(shop.name).counters)
    assert int(counters[b"outcome:blocked"]) >= 20 and int(counters.get(b"dead", 0)) == 0
    assert sum(1 for record in records.values() if record["run_id"] == "run-2") == ITEMS  # each harvested again


def test_a_run_that_ends_with_items_still_blocked_is_not_green(shop, demo_site, worker_settings, mongo_server,
                                                               redis_client, crawl, write_source) -> None:
    first = work(shop, "run-1", start(shop, "run-1", worker_settings, mongo_server, redis_client), crawl)
    assert first["records_stored"] == ITEMS
    few = write_source("walled_shop", **{**shop.model_dump(mode="json", exclude={"name"}), "retries": 1})
    wall(demo_site, after=90, window=600, status=403)  # the 403 variant: past 90 requests, every page is refused
    last = work(few, "run-2", start(few, "run-2", worker_settings, mongo_server, redis_client), crawl)
    assert_right(stored(mongo_server, worker_settings, few), demo_site, range(1, ITEMS + 1))  # none overwritten
    assert last["records_stored"] < ITEMS and last["failures_by_reason"].get("blocked", 0) > 0, last
    assert last["quality"]["outcome"] == "failed", last["quality"]
    assert "stayed blocked past their retries" in last["quality"]["reason"], last["quality"]

