"""Each metric moves when its event happens: real Redis, MongoDB, the demo site and the real batch runner."""

from __future__ import annotations

import time

import pytest
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.metrics.collector import metrics_registry
from harvester.metrics.recording import bucket_field, record_fetches
from harvester.metrics.snapshot import parse_histogram
from harvester.redis_keys import SourceKeys
from harvester.scraping.fetching.fetcher import FetchResult

from tests.metrics.helpers import scrape, value

pytestmark = pytest.mark.integration


@pytest.mark.unit
def test_buckets_are_cumulative_and_end_at_infinity() -> None:
    fields = {bucket_field("fetch_seconds", 0.01): "2", bucket_field("fetch_seconds", 0.3): "1",
              bucket_field("fetch_seconds", 999): "1", "fetch_seconds:sum": "1000.32", "fetch_seconds:count": "4"}
    histogram = parse_histogram("fetch_seconds", fields)
    assert histogram.buckets[0] == ("0.025", 2)
    assert dict(histogram.buckets)["0.5"] == 3 and histogram.buckets[-1] == ("+Inf", 4)
    assert histogram.count == 4 and histogram.sum == pytest.approx(1000.32)


def test_each_metric_moves_when_its_event_happens(write_source, crawl, demo_site, redis_client, worker_settings,
                                                  mongo_server) -> None:
    registry = metrics_registry(redis_client, worker_settings)
    # robots.txt ignored: its fetch would be one more start in the rate window (every request takes a token)
    source = write_source("metered", rate_limit={"max_active": 4, "per_minute": 1000}, retries=1, robots="ignore")
    name = source.name
    product = [TaskMessage(source=name, url=f"{demo_site.url}/product/{i}") for i in (1, 2, 10)]

    # pushed: intake grows, nothing in flight yet
    crawl.push(source, *product)
    samples = scrape(registry)
    assert value(samples, "harvester_tasks_pending", source=name) == 3
    assert value(samples, "harvester_tasks_pushed_total", source=name) == 3
    assert value(samples, "harvester_max_active", source=name) == 4

    # admitted: reserved (in flight), saturation moves; the rate window counts fetch starts, none yet
    admission = crawl.store.admit(name, 3)
    samples = scrape(registry)
    assert value(samples, "harvester_tasks_active", source=name) == 3
    assert value(samples, "harvester_active_saturation", source=name) == pytest.approx(0.75)
    assert value(samples, "harvester_admitted_last_minute", source=name) == 0
    assert value(samples, "harvester_tasks_admitted_total", source=name) == 3

    # fetched and stored: requests by outcome and status, records new, histograms, done, the rate window
    time.sleep(0.2)  # a visible queue latency
    crawl.runner.run(admission.deliveries())
    samples = scrape(registry)
    assert value(samples, "harvester_admitted_last_minute", source=name) == 3
    assert value(samples, "harvester_rate_saturation", source=name) == pytest.approx(0.003)
    assert value(samples, "harvester_requests_total", source=name, outcome="ok", status="200") == 3
    assert value(samples, "harvester_records_stored_total", source=name) == 3
    assert value(samples, "harvester_records_new_total", source=name) == 3
    assert ("harvester_records_updated_total", (("source", name),)) not in samples  # stored - new gives it
    assert value(samples, "harvester_tasks_done_total", source=name) == 3
    assert value(samples, "harvester_tasks_active", source=name) == 0
    assert value(samples, "harvester_fetch_seconds_count", source=name) == 3
    assert value(samples, "harvester_fetch_seconds_sum", source=name) > 0
    assert value(samples, "harvester_queue_latency_seconds_count", source=name) == 3
    assert value(samples, "harvester_queue_latency_seconds_sum", source=name) >= 3 * 0.2
    assert value(samples, "harvester_queue_latency_seconds_bucket", source=name, le="0.1") == 0
    assert value(samples, "harvester_queue_latency_seconds_bucket", source=name, le="+Inf") == 3
    # product 10 has no description: an extraction problem by attribute
    assert value(samples, "harvester_extraction_problems_total", source=name, attribute="description",
                 kind="missing") == 1
    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    assert collection.count_documents({}) == 3

    # the same pages again: updated (stored - new), not new
    crawl.push(source, *product)
    crawl.step(source)
    samples = scrape(registry)
    assert value(samples, "harvester_records_new_total", source=name) == 3
    assert value(samples, "harvester_records_stored_total", source=name) == 6

    # a wrong type
    crawl.push(source, TaskMessage(source=name, url=f"{demo_site.url}/wrong-type/4"))
    crawl.step(source)
    samples = scrape(registry)
    assert value(samples, "harvester_extraction_problems_total", source=name, attribute="price",
                 kind="wrong_type") == 1

    # a 500: a retry; then again past retries: a dead letter
    crawl.push(source, TaskMessage(source=name, url=f"{demo_site.url}/status/500"))
    crawl.step(source)
    samples = scrape(registry)
    assert value(samples, "harvester_requests_total", source=name, outcome="http_error", status="500") == 1
    assert value(samples, "harvester_retries_total", source=name) == 1
    assert value(samples, "harvester_tasks_delayed", source=name) == 1
    deadline = time.monotonic() + 20
    while value(scrape(registry), "harvester_dead_letters_waiting", source=name) == 0:
        assert time.monotonic() < deadline, "the failing task never reached dead letters"
        crawl.step(source)
        time.sleep(0.1)
    samples = scrape(registry)
    assert value(samples, "harvester_dead_letters_total", source=name) == 1
    assert value(samples, "harvester_tasks_failed_total", source=name) == 2
    DeadLetters(redis_client).requeue(name)
    assert value(scrape(registry), "harvester_dead_letters_waiting", source=name) == 0

    # a 429: the source and its host pause (the requeued 500 is dropped first)
    redis_client.delete(SourceKeys(name).intake)
    crawl.push(source, TaskMessage(source=name, url=f"{demo_site.url}/ratelimited/metrics?retry_after=30"))
    crawl.step(source)
    samples = scrape(registry)
    assert value(samples, "harvester_source_paused", source=name) == 1
    assert value(samples, "harvester_hosts", source=name, state="paused") == 1
    assert value(samples, "harvester_hosts", source=name, state="all") == 0  # one host: no other state
    assert value(samples, "harvester_requests_total", source=name, outcome="http_error", status="429") == 1


def test_reaps_queue_depth_and_browser_counters(write_source, redis_client, worker_settings, runner,
                                                demo_site) -> None:
    registry = metrics_registry(redis_client, worker_settings)
    source = write_source("reaped")
    store = RateLimitStore(redis_client, worker_settings)
    Intake(redis_client, worker_settings).push(source, [TaskMessage(source=source.name, url=f"{demo_site.url}/x")])
    admitted = store.admit(source.name, 1)
    store.start(source.name, admitted.leases(), now=admitted.now)  # started, then its worker went silent
    store.reap([source.name], now=admitted.now + worker_settings.lease_seconds + 1)
    samples = scrape(registry)
    assert value(samples, "harvester_reaps_total", source=source.name) == 1
    assert value(samples, "harvester_tasks_pending", source=source.name) == 1

    # Celery queue depth: kombu keeps a queue as a Redis list of messages
    before = value(samples, "harvester_celery_queue_depth", queue="default")
    from harvester.distributor.service import CeleryPublisher, celery_app_for

    CeleryPublisher(celery_app_for(worker_settings), 16).publish([("default", [{"source": source.name}])])
    assert value(scrape(registry), "harvester_celery_queue_depth", queue="default") == before + 1

    # the browser host's totals reach the counters through the batch's outcomes (BatchRunner.finish)
    message = TaskMessage(source=source.name, url=f"{demo_site.url}/product/7")
    redis_client.delete(SourceKeys(source.name).intake)  # only the new task
    Intake(redis_client, worker_settings).push(source, [message])
    store.admit(source.name, 1)
    fetch = FetchResult(message.url, "ok", status=200, text="<h1 class=title>x</h1><span class=sku>S</span>",
                        content_type="text/html", elapsed=0.4)
    runner.finish(source, [message], [fetch], outcomes={"browser_relaunches": 1, "browser_transferred_bytes": 5120,
                                                         "browser_blocked:image": 3, "browser_blocked_requests": 3})
    samples = scrape(registry)
    assert value(samples, "harvester_browser_restarts_total", source=source.name) == 1
    assert value(samples, "harvester_browser_transferred_bytes_total", source=source.name) == 5120
    assert value(samples, "harvester_browser_blocked_requests_total", source=source.name,
                 resource_type="image") == 3
    # the browser load's fetch time is observed like an HTTP one
    assert value(samples, "harvester_fetch_seconds_bucket", source=source.name, le="0.5") == 1


def test_recording_counts_requests_without_a_status(redis_client) -> None:
    message = TaskMessage(source="quiet", url="http://127.0.0.1:1/", enqueued_at=100.0)
    fetch = FetchResult(message.url, "timeout", elapsed=30.0, started_at=160.0)
    record_fetches(redis_client, "quiet", [message], [fetch])
    fields = {k.decode(): v.decode() for k, v in redis_client.hgetall("harvester:{quiet}:histograms").items()}
    assert fields["queue_latency_seconds:60"] == "1" and fields["fetch_seconds:30"] == "1"
    assert redis_client.hget("harvester:{quiet}:requests", "timeout|") == b"1"


def test_reharvest_metrics_count_changes_304s_and_saved_bytes(write_source, crawl, demo_site, redis_client,
                                                              worker_settings, mongo_server) -> None:
    """What a re-harvest found: records changed / unchanged / not modified and the bytes a 304 saved, per source."""
    import urllib.request

    registry = metrics_registry(redis_client, worker_settings)
    source = write_source("metered_again", rate_limit={"max_active": 4, "per_minute": 1000}, robots="ignore",
                          listing=None, input={"kind": "details", "seeds": [f"{demo_site.url}/inc/product/1"]})
    name = source.name
    pages = [f"{demo_site.url}/inc/product/{i}" for i in (1, 2, 5)]  # 5 sends validators but ignores them
    for _ in range(2):
        crawl.push(source, *(TaskMessage(source=name, url=url) for url in pages))
        crawl.step(source)
    urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_inc/price?product=2&price=3.25", method="POST",
                                                  data=b""), timeout=10).close()
    time.sleep(1.1)  # the demo's Last-Modified has whole seconds: the change is a second later
    crawl.push(source, *(TaskMessage(source=name, url=url) for url in pages))
    crawl.step(source)
    urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_inc/reset", method="POST", data=b""),
                           timeout=10).close()
    samples = scrape(registry)
    assert value(samples, "harvester_records_new_total", source=name) == 3
    # second pass: 1 and 2 kept by 304s, 5 fetched in full and the same; third: 1 again, 2 changed, 5 the same
    assert value(samples, "harvester_records_not_modified_total", source=name) == 3
    assert value(samples, "harvester_records_changed_total", source=name) == 1
    # unchanged: stored - new - changed (the run's report keeps it by name)
    stored = value(samples, "harvester_records_stored_total", source=name)
    assert stored - 3 - 1 == 2 and ("harvester_records_unchanged_total", (("source", name),)) not in samples
    assert value(samples, "harvester_requests_total", source=name, outcome="not_modified", status="304") == 3
    assert value(samples, "harvester_bytes_saved_total", source=name) > 1000


def test_each_proxy_tier_of_a_source_counts_its_requests_and_bytes(redis_client, worker_settings,
                                                                   write_source) -> None:
    """A batch's pages by tier (a source with proxy.tiers): the source's cost per tier, for the dashboard."""
    registry = metrics_registry(redis_client, worker_settings)
    source = write_source("metered_tiers", country="SG", proxy={"tiers": ["direct", "residential"]})
    Intake(redis_client, worker_settings).register_source(source)
    assert value(scrape(registry), "harvester_proxy_tier_bytes_total", source=source.name, tier="residential") == 0
    messages = [TaskMessage(source=source.name, url=f"http://shop.example/{number}") for number in (1, 2, 3)]
    fetches = [FetchResult(messages[0].url, "blocked", status=403, tier="direct", transferred=300),
               FetchResult(messages[1].url, "ok", status=200, tier="residential", transferred=4000),
               FetchResult(messages[2].url, "ok", status=200, tier="residential", transferred=5000)]
    record_fetches(redis_client, source.name, messages, fetches)
    samples = scrape(registry)
    assert value(samples, "harvester_proxy_tier_requests_total", source=source.name, tier="direct") == 1
    assert value(samples, "harvester_proxy_tier_requests_total", source=source.name, tier="residential") == 2
    assert value(samples, "harvester_proxy_tier_bytes_total", source=source.name, tier="direct") == 300
    assert value(samples, "harvester_proxy_tier_bytes_total", source=source.name, tier="residential") == 9000
