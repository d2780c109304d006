"""The worker path end to end: real Redis, MongoDB, the distributor process, Celery workers and the demo site.

A listing -> details crawl of the 500-product catalogue lands exactly 500 records, the package
finishes, and the demo site never saw more requests of this source in flight than ``max_active``.
"""

from __future__ import annotations

import time

import pytest
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.storage.packages import PackageStatus, PackageStore, PackageTask, planned_task_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MAX_ACTIVE = 4


@pytest.fixture
def distributor(worker_settings, start_distributor):
    return start_distributor()


def wait_idle(store: RateLimitStore, source: str, timeout: float, condition=lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = store.stats([source])[source]
        if stats.pending == 0 and stats.active == 0 and stats.delayed == 0 and condition():
            return
        time.sleep(0.3)
    pytest.fail(f"{source} not idle after {timeout}s: {store.stats([source])}")


def test_listing_to_details_crawl_of_500_pages(write_source, worker_settings, demo_site, mongo_server,
                                              redis_client, celery_worker_factory, distributor) -> None:
    source = write_source("e2e_shop", rate_limit={"max_active": MAX_ACTIVE, "per_minute": 100_000})
    celery_worker_factory(queues="default", concurrency=2)
    database = mongo_server.client()[worker_settings.mongo_database]
    packages = PackageStore(database)
    packages.ensure_indexes()
    seed = source.input.seeds[0]
    run_id = "run-e2e"
    seed_task = PackageTask(planned_task_id(source.name, run_id, 0, seed), seed, "listing", 0)
    packages.create_packages(source.name, run_id, [(0, [seed_task])])
    Intake(redis_client, worker_settings).push(source, [TaskMessage(
        task_id=seed_task.task_id, source=source.name, kind="listing", url=seed, run_id=run_id, package_id=0)])

    collection = database[source.output_collection]
    store = RateLimitStore(redis_client, worker_settings)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        package = database["packages"].find_one({"source": source.name, "run_id": run_id})
        if package["status"] == PackageStatus.FINISHED:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"crawl did not finish: {store.stats([source.name])}, {collection.count_documents({})} records")

    assert collection.count_documents({}) == 500
    assert len(collection.distinct("url")) == 500
    assert collection.count_documents({"run_id": run_id, "sku": {"$regex": "^SKU-"}}) == 500
    assert len(package["done"]) == 510 and package["failed"] == []  # 500 details + 10 listing pages
    observed = demo_site.client_stats(source.name)
    assert observed["total"] == 510
    assert 2 <= observed["max_concurrent"] <= MAX_ACTIVE, observed
    stats = store.stats([source.name])[source.name]
    assert stats.active == 0 and stats.pending == 0 and stats.dead_letters_waiting == 0


def test_every_fault_ends_stored_retried_or_dead_lettered_and_no_worker_crashes(
        write_source, worker_settings, demo_site, mongo_server, redis_client, celery_worker_factory,
        distributor) -> None:
    from harvester.distributor import DeadLetters
    from harvester.services.ports import free_port

    source = write_source("e2e_faults", retries=1, timeout=1,
                          listing={"link_selectors": ["a.product-link"], "next_page_selectors": ["a.next"],
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$", "max_depth": 0})
    worker = celery_worker_factory(queues="default", concurrency=1)
    site = demo_site.url
    stored_paths = ["/product/1", "/flaky/e2e?fail=1", "/ratelimited/e2e?retry_after=1", "/huge?mb=2",
                    "/malformed", "/wrong-type/2"]
    dead_paths = {"/redirect-loop/a": "too_many_redirects", "/data.json": "parse_error",
                  "/slow/3?delay=5": "timeout", "/js/product/4": "record rejected: sku: missing",
                  "/product/99999": "http_404", "/blocked": "blocked"}
    messages = [TaskMessage(source=source.name, url=f"{site}{path}") for path in [*stored_paths, *dead_paths]]
    dead_host = f"http://127.0.0.1:{free_port()}/product/1"
    messages.append(TaskMessage(source=source.name, url=dead_host))
    messages.append(TaskMessage(source=source.name, kind="listing", url=f"{site}/shop?page=2&per_page=3"))
    Intake(redis_client, worker_settings).push(source, messages)
    store = RateLimitStore(redis_client, worker_settings)
    wait_idle(store, source.name, timeout=120)

    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    stored = {document["url"] for document in collection.find({}, {"url": 1})}
    # the listing page leads to products 4 to 6 (canonicalised, tracking parameters dropped)
    assert {f"{site}{path}" for path in stored_paths if "?" not in path} <= stored
    assert f"{site}/flaky/e2e?fail=1" in stored and f"{site}/ratelimited/e2e?retry_after=1" in stored
    assert f"{site}/huge?mb=2" in stored and {f"{site}/product/{n}" for n in (4, 5, 6)} <= stored
    assert len(stored) == len(stored_paths) + 3
    reasons = {entry.message["url"]: entry.reason for entry in DeadLetters(redis_client).list(source.name)}
    for path, reason in dead_paths.items():
        assert reasons[f"{site}{path}"].startswith(reason), reasons
    assert reasons[dead_host].startswith("host_unreachable")  # one task: below host_breaker_failures
    assert len(reasons) == len(dead_paths) + 1
    counters = store.counters(source.name)
    assert counters["outcome:http_500"] == 1 and counters["outcome:http_429"] == 1
    assert counters["outcome:links_ignored:not_http"] == 3  # javascript:, mailto:, file:
    assert counters["outcome:links_ignored:not_followed"] == 1  # the off-site link
    assert counters["outcome:links_ignored:beyond_max_depth"] == 1  # the next page (max_depth 0)
    assert worker.alive()


def test_a_killed_worker_loses_nothing_and_duplicates_nothing(
        write_source, worker_settings, demo_site, mongo_server, redis_client, celery_worker_factory,
        start_distributor, monkeypatch) -> None:
    for key, value in {"HARVESTER_LEASE_SECONDS": "3", "HARVESTER_REAP_INTERVAL_SECONDS": "0.5",
                       "HARVESTER_HEARTBEAT_SECONDS": "0.5"}.items():
        monkeypatch.setenv(key, value)
    source = write_source("e2e_killed", input={"seeds": [f"{demo_site.url}/shop?per_page=50"], "kind": "listing"},
                          listing={"link_selectors": ["a.product-link"], "next_page_selectors": ["a.next"],
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$", "max_depth": 1},
                          rate_limit={"max_active": 4, "per_minute": 100_000})
    start_distributor()
    first = celery_worker_factory(queues="default", concurrency=1)
    Intake(redis_client, worker_settings).push(source, [TaskMessage(
        source=source.name, kind="listing", url=source.input.seeds[0])])
    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # mid-crawl AND mid-batch: the site is serving this worker now
        if collection.count_documents({}) >= 20 and demo_site.client_stats(source.name)["current"] > 0:
            break
        time.sleep(0.01)
    first.kill()  # SIGKILL: the leases of its batch expire and the reaper re-queues the tasks
    celery_worker_factory(queues="default", concurrency=1)
    store = RateLimitStore(redis_client, worker_settings)
    wait_idle(store, source.name, timeout=120, condition=lambda: collection.count_documents({}) >= 100)
    assert collection.count_documents({}) == 100
    assert len(collection.distinct("url")) == 100
    assert store.stats([source.name])[source.name].dead_letters_waiting == 0
    assert store.counters(source.name).get("reaped", 0) >= 1  # the killed batch came back through its leases
