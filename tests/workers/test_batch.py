"""The batch runner (what `harvester.scrape_batch` runs) against real Redis, MongoDB and the demo site."""

from __future__ import annotations

import asyncio
import time

import pymongo
import pytest
from harvester.distributor import DeadLetters, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.storage.url_store import URLStore

from tests.fixtures.demo_site import demo_source_document
from tests.workers.conftest import Crawl

pytestmark = pytest.mark.integration


def records(mongo_server, settings, source) -> pymongo.collection.Collection:
    return mongo_server.client()[settings.mongo_database][source.output_collection]


def dead_reasons(redis_client, source) -> list[str]:
    return [entry.reason for entry in DeadLetters(redis_client).list(source.name)]


def run_until_idle(crawl, source, timeout: float = 30.0) -> list[dict]:
    reports, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = crawl.step(source)
        if report is None:
            stats = crawl.store.stats([source.name])[source.name]
            if stats.pending == 0 and stats.delayed == 0 and stats.active == 0:
                return reports
            time.sleep(0.1)
            continue
        reports.append(report)
    raise AssertionError(f"crawl not idle after {timeout}s: {crawl.store.stats([source.name])}")


def test_listing_to_details_stores_every_product_once(write_source, crawl, demo_site, mongo_server,
                                                       worker_settings, redis_client) -> None:
    source = write_source(listing={"link_selectors": ["a.product-link", "a.more"], "next_page_selectors": ["a.next"],
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$", "max_depth": 1})
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page=20"))
    run_until_idle(crawl, source)
    collection = records(mongo_server, worker_settings, source)
    assert collection.count_documents({}) == 40  # max_depth 1: the seed page and page 2
    stored = collection.find_one({"url": f"{demo_site.url}/product/12"})
    assert stored["sku"] == "SKU-00012" and stored["first_seen_at"] == stored["harvested_at"]
    assert "utm_source" not in stored["url"]
    counters = crawl.store.counters(source.name)
    assert counters["outcome:records_stored"] == 40 and counters["outcome:missing:description"] == 4
    assert counters["outcome:links_ignored:beyond_max_depth"] == 1
    # the same listing again: every URL is a duplicate within the harvesting lag, nothing new is queued
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page=20"))
    report = crawl.step(source)
    assert report["discovered"] == 0 and crawl.store.stats([source.name])[source.name].pending == 0


def test_a_retried_task_never_duplicates_a_record(write_source, crawl, demo_site, mongo_server,
                                                  worker_settings) -> None:
    source = write_source()
    message = TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/3")
    for _ in range(2):
        crawl.push(source, message)
        crawl.step(source)
    collection = records(mongo_server, worker_settings, source)
    assert collection.count_documents({}) == 1
    document = collection.find_one()
    assert document["first_seen_at"] < document["harvested_at"]
    assert any(index["unique"] for index in collection.list_indexes() if index["name"] == "harvester_output_key")


def test_max_new_urls_caps_a_run(write_source, crawl, demo_site, mongo_server, worker_settings) -> None:
    source = write_source(listing={"link_selectors": ["a.product-link"], "next_page_selectors": ["a.next"],
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/", "max_depth": 5,
                                   "max_new_urls": 30})
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page=20",
                                   run_id="r1"))
    run_until_idle(crawl, source)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 30


def test_500_then_success_on_retry(write_source, crawl, demo_site, mongo_server, worker_settings) -> None:
    source = write_source()
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/flaky/batch?fail=1"))
    reports = run_until_idle(crawl, source)
    assert [report["outcomes"].get("http_500", 0) for report in reports] == [1, 0]
    assert records(mongo_server, worker_settings, source).count_documents({}) == 1


def test_dead_host_is_retried_then_dead_lettered(write_source, crawl, redis_client) -> None:
    from harvester.services.ports import free_port

    source = write_source(retries=1)
    crawl.push(source, TaskMessage(source=source.name, url=f"http://127.0.0.1:{free_port()}/product/1"))
    reports = run_until_idle(crawl, source)
    assert len(reports) == 2  # two failures in a row: below host_breaker_failures (3), retries are spent as before
    assert dead_reasons(redis_client, source)[0].startswith("host_unreachable")


def test_429_pauses_the_whole_source(write_source, crawl, demo_site, redis_client, mongo_server,
                                     worker_settings) -> None:
    source = write_source()
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/ratelimited/batch?retry_after=2"))
    first = crawl.step(source)
    assert first["outcomes"] == {"http_429": 1} and first["retried"] == 1
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/product/1"))
    admission = crawl.store.admit(source.name, 10)
    assert admission.status == "paused" and admission.messages == []
    assert float(redis_client.get(SourceKeys(source.name).paused_until)) > time.time() + 1
    run_until_idle(crawl, source, timeout=20)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 2


@pytest.mark.parametrize(("path", "reason"), [
    ("/redirect-loop/a", "too_many_redirects"),
    ("/data.json", "parse_error: not an HTML page"),
    ("/product/99999", "http_404"),
    ("/js/product/4", "record rejected: sku: missing"),
])
def test_permanent_failures_are_dead_lettered_at_once(write_source, crawl, demo_site, redis_client,
                                                      path, reason) -> None:
    source = write_source()
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}{path}"))
    assert len(run_until_idle(crawl, source)) == 1
    assert dead_reasons(redis_client, source)[0].startswith(reason)


def test_oversized_malformed_and_mistyped_pages_are_stored_with_gaps_counted(
        write_source, crawl, demo_site, mongo_server, worker_settings) -> None:
    source = write_source()
    for path in ("/huge?mb=2", "/malformed", "/wrong-type/9"):
        crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}{path}"))
    run_until_idle(crawl, source)
    collection = records(mongo_server, worker_settings, source)
    assert collection.count_documents({}) == 3
    assert collection.find_one({"url": f"{demo_site.url}/wrong-type/9"})["price"] is None
    counters = crawl.store.counters(source.name)
    assert counters["outcome:truncated"] == 1 and counters["outcome:wrong_type:price"] == 1


def test_discard_sink_writes_nothing(write_source, crawl, demo_site, mongo_server, worker_settings,
                                     monkeypatch) -> None:
    source = write_source()
    crawl.runner.data.settings = worker_settings.model_copy(update={"output_sink": "discard"})
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/product/1"))
    report = crawl.step(source)
    assert report["stored"] == 1
    assert records(mongo_server, worker_settings, source).count_documents({}) == 0


def test_duplicate_checker_answers_thousands_in_one_round_trip_and_mongo_is_the_authority(
        write_source, redis_client, mongo_server, worker_settings, runner) -> None:
    source = write_source()
    store = URLStore(redis_client)
    urls = [f"http://x.example/p/{i}" for i in range(5000)]
    assert store.filter_new(source, urls[:2500], owner="a") == urls[:2500]
    assert store.filter_new(source, urls, owner="b") == urls[2500:]
    assert store.filter_new(source, urls[:10], owner="a") == urls[:10]  # a retry of task a gets its own back
    ttl = redis_client.ttl(URLStore.key(source.name, urls[0]))
    assert 0 < ttl <= source.harvesting_lag.total_seconds()
    runner.data.write(source, [{"url": "http://x.example/stored", "sku": "s"}])
    collection = runner.data.collection(source)
    assert store.filter_new(source, ["http://x.example/stored", "http://x.example/new"], authority=collection) == [
        "http://x.example/new"]


def test_pages_fetched_elsewhere_finish_the_same_way(write_source, crawl, demo_site, mongo_server,
                                                     worker_settings) -> None:
    """What a page slot calls after rendering in its browser: same extraction, storage and release."""
    from harvester.scraping.fetching.fetcher import FetchResult
    from harvester_demo.app import page, product_body

    source = write_source()
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/js/product/6"))
    admission = crawl.store.admit(source.name, 1)
    message = admission.task_messages()[0]
    crawl.store.start(source.name, {message.task_id: message.lease_token})  # what the page slot's batch did
    rendered = FetchResult(message.url, "ok", final_url=message.url, status=200, text=page("p", product_body(6)))
    report = crawl.runner.finish(source, [message], [rendered])
    assert report.stored == 1
    assert records(mongo_server, worker_settings, source).find_one()["sku"] == "SKU-00006"
    assert crawl.store.stats([source.name])[source.name].active == 0


def one_batch_while_reaping(runner, redis_client, source, url: str):
    """Run one admitted task's batch on a thread while doing what the distributor does every reap interval:
    (the crawl, the tasks reaped meanwhile, the seconds the batch took)."""
    import threading

    crawl = Crawl(runner, redis_client)
    crawl.push(source, TaskMessage(source=source.name, url=url))
    admitted = crawl.store.admit(source.name, 1).deliveries()
    worker = threading.Thread(target=runner.run, args=(admitted,))
    started = time.monotonic()
    worker.start()
    reaped = 0
    while worker.is_alive():
        reaped += crawl.store.reap().reaped
        time.sleep(0.1)
    return crawl, reaped, time.monotonic() - started


def short_lease_runner(monkeypatch, **environment: str):
    """A batch runner whose leases last 1 s, heartbeaten every 0.2 s (plus ``environment``)."""
    from harvester.settings import get_settings
    from harvester.workers.batch import BatchRunner

    for name, value in {"HARVESTER_LEASE_SECONDS": "1", "HARVESTER_HEARTBEAT_SECONDS": "0.2", **environment}.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    return BatchRunner(get_settings())


def test_leases_are_heartbeaten_while_a_slow_batch_runs(write_source, demo_site, redis_client, monkeypatch,
                                                        mongo_server) -> None:
    runner = short_lease_runner(monkeypatch)
    try:
        source = write_source()
        crawl, reaped, _ = one_batch_while_reaping(runner, redis_client, source, f"{demo_site.url}/slow/1?delay=2.5")
        assert reaped == 0
        stats = crawl.store.stats([source.name])[source.name]
        assert (stats.active, stats.pending, stats.delayed) == (0, 0, 0)
    finally:
        runner.close()


def test_leases_are_heartbeaten_while_the_stored_validators_are_read_from_a_mongodb_that_does_not_answer(
        write_source, demo_site, redis_client, monkeypatch) -> None:
    """The batch's first MongoDB read (the validators of its detail pages) runs under its
    heartbeat: read before it, a MongoDB that did not answer for longer than a lease let the reaper hand
    the tasks to another worker while this one still fetched them (the site saw 8 in flight for
    max_active 4 in the fault matrix's row 6 a)."""
    import socket

    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers one
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    runner = short_lease_runner(
        monkeypatch, HARVESTER_MONGO_URI=f"mongodb://127.0.0.1:{silent.getsockname()[1]}/?directConnection=true",
        HARVESTER_PRODUCER_MONGO_TIMEOUT_MS="2500")
    try:
        _, reaped, seconds = one_batch_while_reaping(runner, redis_client, write_source(),
                                                     f"{demo_site.url}/product/3")
        assert seconds > 2  # the reads did wait for MongoDB, longer than the lease
        assert reaped == 0
    finally:
        runner.close()
        silent.close()


def test_a_batch_past_its_deadline_holds_nothing_so_it_starts_no_request(write_source, redis_client,
                                                                           worker_settings) -> None:
    """Past the deadline the heartbeats stop and the leases will expire: from then on no request of the
    batch may start (the reaper hands its tasks to another worker, which fetches them)."""
    from harvester.distributor import Intake, RateLimitStore
    from harvester.workers.heartbeat import LeaseHeartbeat, RateTokenPermit

    source = write_source()
    Intake(redis_client, worker_settings).push(source, [TaskMessage(source=source.name, url="http://a.example/1")])
    store = RateLimitStore(redis_client, worker_settings)
    task = store.admit(source.name, 1).task_messages()[0]
    leases = {task.task_id: str(task.lease_token)}
    assert store.start(source.name, leases).held == [task.task_id]
    with LeaseHeartbeat(store, source.name, leases, interval=0.1, max_seconds=0.6) as heartbeat:
        permit = RateTokenPermit(store, source.name, [task.task_id], heartbeat)
        time.sleep(0.35)  # beats found the lease held
        assert heartbeat.held == {task.task_id}
        deadline = time.monotonic() + 10
        while heartbeat.held and time.monotonic() < deadline:
            time.sleep(0.05)
        assert heartbeat.held == set()
        assert asyncio.run(permit(0)) is False


def test_not_modified_releases_without_writing(write_source, crawl, demo_site, mongo_server, worker_settings,
                                               redis_client) -> None:
    source = write_source()
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/status/304"))
    report = crawl.step(source)
    assert report["outcomes"] == {"not_modified": 1} and report["stored"] == 0 and report["dead"] == 0
    assert records(mongo_server, worker_settings, source).count_documents({}) == 0
    assert crawl.store.stats([source.name])[source.name].active == 0 and dead_reasons(redis_client, source) == []


def test_a_stuck_batch_stops_being_vouched_for(redis_client, worker_settings) -> None:
    """Heartbeats end after max_seconds, so a batch hung past every timeout loses its leases."""
    from harvester.distributor import RateLimitStore
    from harvester.workers.batch import LeaseHeartbeat

    store = RateLimitStore(redis_client, worker_settings)
    beats: list[float] = []
    original = store.heartbeat
    store.heartbeat = lambda source, leases: beats.append(time.monotonic()) or original(source, leases)
    with LeaseHeartbeat(store, "stuck", {"t1": "1"}, interval=0.05, max_seconds=0.3):
        time.sleep(0.8)
    assert 3 <= len(beats) <= 7 and beats[-1] - beats[0] < 0.4


def test_a_yaml_edit_reaches_a_running_worker_only_through_the_next_registration(
        write_source, crawl, demo_site, mongo_server, worker_settings) -> None:
    """The worker reads the source the producer registered (one copy, by version), never the YAML file."""
    source = write_source()
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/product/1"))  # registers it
    crawl.step(source)
    registered = crawl.runner.sources.version(source.name)
    attributes = {name: attribute for name, attribute in
                  demo_source_document(demo_site.url)["attributes"].items() if name != "title"}
    edited = write_source(attributes=attributes)  # the YAML file changes under the running worker
    crawl.intake.push(source.name, [TaskMessage(source=source.name, url=f"{demo_site.url}/product/2")])
    crawl.step(source)
    collection = records(mongo_server, worker_settings, source)
    assert collection.find_one({"url": f"{demo_site.url}/product/2"})["title"]  # still the registered copy
    assert crawl.runner.sources.version(source.name) == registered
    crawl.intake.register_source(edited)  # what the next produce step does
    crawl.intake.push(source.name, [TaskMessage(source=source.name, url=f"{demo_site.url}/product/3")])
    crawl.step(source)
    assert "title" not in collection.find_one({"url": f"{demo_site.url}/product/3"})
    assert crawl.runner.sources.version(source.name) != registered


def test_a_task_of_an_unregistered_source_is_retried_never_read_from_yaml(
        write_source, crawl, demo_site, redis_client) -> None:
    source = write_source(retries=0)  # its YAML file is there, but no producer registered it
    crawl.push(source, TaskMessage(source=source.name, url=f"{demo_site.url}/product/1"))
    redis_client.hdel(SourceKeys(source.name).config, "version", "document")  # a registration of old
    report = crawl.step(source)
    assert report["outcomes"] == {"config_error": 1} and report["dead"] == 1  # retries 0: the next is dead
    assert "is not registered" in dead_reasons(redis_client, source)[0]


def test_a_batch_of_refused_pages_ends_in_one_round_trip_and_one_count_down(
        write_source, configure_settings, demo_site, redis_client, mongo_server) -> None:
    """Each task of a batch the site refused was handed back in a round trip of its own (each waking the
    distributors) and counted down in its package on its own; now the batch's endings go in one round trip
    and its dead tasks are counted down together (FailurePolicy.deferred). The settle interval is one a loaded
    machine's eight quick pages end within (at the default 0.1 s they may end in two waves: two round trips)."""
    from harvester.storage import PackageStatus, PackageStore, planned_task_id
    from harvester.workers.batch import BatchRunner

    worker_settings = configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1,
                                         lease_seconds=30, batch_settle_interval_seconds=3)
    runner = BatchRunner(worker_settings)
    crawl = Crawl(runner, redis_client)

    source = write_source(retries=0, rate_limit={"max_active": 16, "per_minute": 10_000})
    urls = [f"{demo_site.url}/product/{99990 + n}" for n in range(4)]  # 404: dead at once
    urls += [f"{demo_site.url}/flaky/refused{n}?fail=1" for n in range(4)]  # 500: a retry, past retries 0: dead
    packages = PackageStore(mongo_server.client()[worker_settings.mongo_database])
    packages.create_packages(source.name, "run1", [(0, urls)])
    crawl.push(source, *[TaskMessage(task_id=planned_task_id(source.name, "run1", 0, url), source=source.name,
                                     url=url, run_id="run1", package_id=0) for url in urls])
    redis_client.config_resetstat()

    report = crawl.step(source)

    assert report["dead"] == 8 and report["retried"] == 0, report
    assert int(redis_client.info("commandstats")["cmdstat_ltrim"]["calls"]) == 1  # one wake-up: one round trip
    assert sorted(reason.split(":")[0] for reason in dead_reasons(redis_client, source)) == ["http_404"] * 4 + [
        "http_500"] * 4
    statuses, tasks = packages.summary(source.name, "run1")
    assert statuses[PackageStatus.FINISHED] == 1 and tasks["failed"] == 8
    runner.close()
