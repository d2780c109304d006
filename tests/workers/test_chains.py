"""A chain (an API whose next request is built from its response, ``listing.next``) followed inside its batch:
each next request takes its parent's place under admission's checks, so per_minute, max_active and the bounds
hold as through intake; a worker killed mid-chain loses no item and resumes at its page. Real Redis, a
MongoDB-wire server and the demo's GraphQL endpoint; the killed worker is a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from harvester.distributor import DeadLetters, RateLimitStore
from harvester.workers.batch import BatchRunner

from tests.workers.conftest import Crawl
from tests.workers.test_post_sources import plan_and_produce, wait_finished, write

pytestmark = pytest.mark.integration

QUERY = ("query($first: Int!, $after: String) { products(first: $first, after: $after) "
         "{ edges { node { sku title } } pageInfo { endCursor hasNextPage } } }")
PRODUCTS = 500  # the session demo site's catalogue


def chain_document(site: str, name: str, page_size: int, max_active: int = 1, per_minute: int = 100_000,
                   max_depth: int = 50) -> dict[str, Any]:
    return {
        "name": name, "content": "json", "harvesting_lag": 0, "headers": {"X-Demo-Client": name}, "retries": 2,
        "rate_limit": {"max_active": max_active, "per_minute": per_minute},
        "input": {"requests": [{"url": f"{site}/graphql",
                                "json": {"query": QUERY, "variables": {"first": page_size}}}]},
        "listing": {
            "max_depth": max_depth,
            "next": {"cursor": "data.products.pageInfo.endCursor", "into": "variables.after",
                     "while": "data.products.pageInfo.hasNextPage"},
            "records": {"item": "json:data.products.edges[].node", "key": ["sku"],
                        "attributes": {"sku": {"json": "sku", "required": True}, "title": {"json": "title"}}}},
    }


@pytest.fixture
def chain_settings(configure_settings):
    """Leases of 20 s (a batch follows a chain for half of one: 10 s; a killed worker's chain comes back after
    one) and a 3 s rate window (per_minute tested in seconds, not minutes)."""
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=20,
                              rate_window_seconds=3, rate_window_margin_seconds=0.2, reap_interval_seconds=0.5)


@pytest.fixture
def chain_crawl(chain_settings, redis_client):
    runner = BatchRunner(chain_settings)
    yield Crawl(runner, redis_client)
    runner.close()


def test_a_chain_is_followed_inside_one_batch_one_request_at_a_time(chain_settings, chain_crawl, demo_site,
                                                                     mongo_server, redis_client) -> None:
    source = write(chain_settings, chain_document(demo_site.url, "chain_inline", 50))
    database = plan_and_produce(source, chain_settings, mongo_server, redis_client, "run-inline")
    report = chain_crawl.step(source)
    assert report is not None
    assert report["tasks"] == 10 and report["outcomes"]["chain_continued"] == 9, report["outcomes"]  # ONE delivery
    assert chain_crawl.step(source) is None  # nothing went through intake
    wait_finished(database, source.name, "run-inline", chain_crawl, source)
    assert database[source.output_collection].count_documents({}) == PRODUCTS
    assert demo_site.api_requests() == {"POST /graphql": 10}
    assert demo_site.client_stats(source.name)["max_concurrent"] == 1  # max_active 1 held through the chain
    counters = chain_crawl.store.counters(source.name)
    assert counters["chained"] == 9 and counters["done"] == 10 and counters["admitted"] == 10
    stats = chain_crawl.store.stats([source.name])[source.name]
    assert stats.active == 0 and stats.pending == 0


def test_a_chain_stops_at_per_minute_and_goes_on_through_intake(chain_settings, chain_crawl, demo_site,
                                                                 mongo_server, redis_client) -> None:
    """per_minute 4 (a 3 s window here): robots.txt's request and 3 POSTs fill the window, so the 4th POST is
    refused its place and handed to intake, which admits it when the window has room; the site never sees more
    than 4 starts in a window."""
    source = write(chain_settings, chain_document(demo_site.url, "chain_rate", 50, per_minute=4))
    database = plan_and_produce(source, chain_settings, mongo_server, redis_client, "run-rate")
    report = chain_crawl.step(source)
    assert report is not None and report["tasks"] == 3, report["outcomes"]
    assert report["outcomes"]["chain_handed_on:rate_limit"] == 1 and report["outcomes"]["chain_continued"] == 2
    assert demo_site.api_requests() == {"POST /graphql": 3}
    wait_finished(database, source.name, "run-rate", chain_crawl, source, timeout=60)
    assert database[source.output_collection].count_documents({}) == PRODUCTS
    assert demo_site.api_requests() == {"POST /graphql": 10}
    starts = sorted(demo_site.requests_of(source.name)["starts"])
    assert len(starts) == 10
    assert all(later - earlier >= 3 for earlier, later in zip(starts, starts[4:], strict=False)), starts


def test_a_chain_stops_at_max_depth(chain_settings, chain_crawl, demo_site, mongo_server, redis_client) -> None:
    source = write(chain_settings, chain_document(demo_site.url, "chain_deep", 50, max_depth=3))
    database = plan_and_produce(source, chain_settings, mongo_server, redis_client, "run-deep")
    report = chain_crawl.step(source)
    assert report is not None and report["tasks"] == 4  # depths 0..3
    assert report["outcomes"]["links_ignored:beyond_max_depth"] == 1
    wait_finished(database, source.name, "run-deep", chain_crawl, source)
    assert demo_site.api_requests() == {"POST /graphql": 4}
    assert database[source.output_collection].count_documents({}) == 200


WORKER = """
import sys
from harvester.distributor import RateLimitStore
from harvester.settings import get_settings
from harvester.workers.batch import BatchRunner
settings = get_settings()
runner = BatchRunner(settings)
admission = RateLimitStore(runner.redis, settings).admit(sys.argv[1], 16)
print("admitted", len(admission.messages), flush=True)
runner.run(admission.deliveries())
print("finished", flush=True)
"""


def test_a_worker_killed_mid_chain_loses_no_item_and_resumes_at_its_page(chain_settings, chain_crawl, demo_site,
                                                                         mongo_server, redis_client, tmp_path
                                                                         ) -> None:
    """50 pages of 10 items in one batch of a real process, SIGKILLed after some pages: the page it held comes
    back when its lease expires (attempt 1) with the cursor it had reached, so the rest of the chain is read
    from there; every item is stored, and the site sees each page once, the one being fetched at most twice."""
    source = write(chain_settings, chain_document(demo_site.url, "chain_killed", 10))
    database = plan_and_produce(source, chain_settings, mongo_server, redis_client, "run-killed")
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-c", WORKER, source.name], env=dict(os.environ), stdout=log,
                              stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while demo_site.api_requests().get("POST /graphql", 0) < 12 and time.monotonic() < deadline \
            and worker.poll() is None:
        time.sleep(0.02)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    log.close()
    sent_before = demo_site.api_requests()["POST /graphql"]
    assert 12 <= sent_before < 50, (tmp_path / "worker.log").read_text()
    stored_before = database[source.output_collection].count_documents({})
    assert stored_before >= 10 * (sent_before - 2)  # what it had read was stored as it went

    # the reaper brings the chain's current page back once its lease expires, then a worker goes on from there
    store = RateLimitStore(redis_client, chain_settings)
    deadline = time.monotonic() + 2 * chain_settings.lease_seconds
    while store.reap([source.name]).reaped == 0:
        assert time.monotonic() < deadline, store.stats([source.name])
        time.sleep(0.2)
    wait_finished(database, source.name, "run-killed", chain_crawl, source, timeout=90)
    skus = [record["sku"] for record in database[source.output_collection].find({}, {"sku": 1})]
    assert len(skus) == len(set(skus)) == PRODUCTS  # no item lost, none twice
    assert demo_site.api_requests()["POST /graphql"] <= 50 + 1  # at most the page in flight was asked again
    assert DeadLetters(redis_client).list(source.name) == []
    assert chain_crawl.store.counters(source.name)["reaped"] == 1


def test_a_chain_goes_at_its_own_pace_beside_a_slow_page_of_its_batch(configure_settings, demo_site, mongo_server,
                                                                      redis_client) -> None:
    """A refilling batch settles a chain's page as soon as it ends, so its next request goes at once: a slow page in
    the same batch does not hold every hop of the chain to the end of its settle wave (1 s here: 9 hops would take
    9 s in lockstep; the slow page takes 8 s). The chain's own pace took 3.7 s once in a clean-clone CI on 2 slow
    vCPUs, over the 3.5 s this allowed when the wave was 0.5 s and the slow page 4 s: both are doubled, so what the
    chain may take stays well apart from what either way of waiting would."""
    import threading

    settings = configure_settings(heartbeat_seconds=1, lease_seconds=20, batch_settle_interval_seconds=1.0)
    document = chain_document(demo_site.url, "chain_own_pace", 50, max_active=2)
    document["input"]["requests"].append({"url": f"{demo_site.url}/slow/2?delay=8", "method": "GET"})
    source = write(settings, document)
    database = plan_and_produce(source, settings, mongo_server, redis_client, "run-pace")
    runner = BatchRunner(settings)
    try:
        crawl = Crawl(runner, redis_client)
        started = time.monotonic()
        reports = []
        worker = threading.Thread(target=lambda: reports.append(crawl.step(source)))
        worker.start()
        collection = database[source.output_collection]
        while collection.count_documents({}) < PRODUCTS and worker.is_alive():
            time.sleep(0.05)
        chain_seconds = time.monotonic() - started
        worker.join(timeout=30)
        assert collection.count_documents({}) == PRODUCTS
        assert chain_seconds < 6.0, f"the chain waited for its batch's waves: {chain_seconds:.1f} s"
    finally:
        runner.close()
