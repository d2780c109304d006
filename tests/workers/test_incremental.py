"""Incremental harvests end to end against real Redis, MongoDB and the demo site: a run is
planned and produced as the DAG does, its tasks admitted and run through the worker's batch pipeline
(in this process), and the run's report read as the ``report`` task writes it.

- a second run of an unchanged site fetches bodies only for the pages that changed (counted at the site);
- a price change lands in the history once, with its previous value;
- sitemap indexes with gzip children are read, ``lastmod`` skips unchanged pages past the lag;
- hostile sitemaps (50 MB, an index that lists itself, an XML bomb, a gzip bomb, endless nesting) are
  bounded and named in the report;
- the demo site serves its other pages while it builds a gzip bomb.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from harvester.config.model import SourceConfig
from harvester.producer.planner import Planner, PlanOptions
from harvester.producer.producer import Producer
from harvester.producer.progress import RunSettlement
from harvester.storage.changes import history_collection_name

pytestmark = [pytest.mark.integration]

DETAILS_FOLLOW = r"/inc/product/\d+$"


def post(url: str) -> Any:
    request = urllib.request.Request(url, method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def site_stats(demo_site, client: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{demo_site.url}/_inc/stats", timeout=10) as response:
        return json.load(response).get(client, {"statuses": {}, "body_bytes": 0})


@pytest.fixture
def inc_site(demo_site):
    post(f"{demo_site.url}/_inc/reset")
    yield demo_site
    post(f"{demo_site.url}/_inc/reset")


class Harvest:
    """One run as the DAG does it: plan, produce, the workers' batches until nothing is left, the report."""

    def __init__(self, worker_settings, mongo_server, redis_client, crawl) -> None:
        self.settings = worker_settings
        self.database = mongo_server.client()[worker_settings.mongo_database]
        self.redis = redis_client
        self.crawl = crawl

    def run(self, source: SourceConfig, run_id: str, timeout: float = 120.0,
            options: PlanOptions | None = None) -> dict[str, Any]:
        planner = Planner(self.database, None, self.database)
        planner.plan(source, run_id, options or PlanOptions.for_source(source))
        Producer.from_settings(self.settings, self.database, self.redis).produce(source, run_id)
        settlement = RunSettlement(self.database, self.database, self.redis)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.crawl.step(source, 16) is None:
                if settlement.settle_and_measure(source.name, source.output_collection, run_id).complete:
                    break
                time.sleep(0.2)
        else:
            progress = settlement.settle_and_measure(source.name, source.output_collection, run_id)
            pytest.fail(f"run {run_id} did not finish: {progress}")
        return settlement.report(source.name, source.output_collection, run_id)

    def records(self, source: SourceConfig) -> dict[str, dict[str, Any]]:
        return {record["url"]: record for record in self.database[source.output_collection].find()}


@pytest.fixture
def harvest(worker_settings, mongo_server, redis_client, crawl) -> Harvest:
    return Harvest(worker_settings, mongo_server, redis_client, crawl)


def details_source(write_source, site, name: str, ids: range, **overrides: Any) -> SourceConfig:
    return write_source(name, input={"kind": "details", "seeds": [f"{site.url}/inc/product/{i}" for i in ids]},
                        listing=None, harvesting_lag=0, **overrides)


def test_a_second_run_of_an_unchanged_site_fetches_only_the_bodies_of_pages_that_changed(
        write_source, inc_site, harvest) -> None:
    source = details_source(write_source, inc_site, "inc_conditional", range(1, 41))
    first = harvest.run(source, "run-1")
    assert first["records_new"] == 40 and first["records_not_modified"] == 0
    records = harvest.records(source)
    # ids ending in 0 send no validators: their records keep none, and nothing is sent back for them
    assert "_http" not in records[f"{inc_site.url}/inc/product/10"]
    assert records[f"{inc_site.url}/inc/product/7"]["_http"]["etag"].startswith('"')
    assert site_stats(inc_site, source.name)["statuses"] == {"200": 40}

    post(f"{inc_site.url}/_inc/price?product=7&price=99.5")  # one page changes between the runs
    post(f"{inc_site.url}/_stats/reset")
    before = site_stats(inc_site, source.name)
    second = harvest.run(source, "run-2")
    after = site_stats(inc_site, source.name)
    statuses = {code: after["statuses"].get(code, 0) - before["statuses"].get(code, 0) for code in ("200", "304")}
    # 40 pages: 4 without validators and 4 that ignore them answer 200, product 7 changed: 200, 31 are 304
    assert statuses == {"200": 9, "304": 31}
    assert second["records_not_modified"] == 31
    assert second["records_changed"] == 1 and second["records_new"] == 0
    assert second["records_unchanged"] == 8 and second["records_stored"] == 40
    first_bytes = site_stats(inc_site, source.name)["body_bytes"]
    assert second["bytes_saved"] > 0 and first_bytes > 0
    kept = harvest.records(source)
    assert kept[f"{inc_site.url}/inc/product/7"]["price"] == 99.5
    assert all(record["run_id"] == "run-2" for record in kept.values())
    third = f"{inc_site.url}/inc/product/3"
    assert kept[third]["harvested_at"] > records[third]["harvested_at"]  # a 304 refreshes, keeps the values
    assert kept[third]["price"] == records[third]["price"] and kept[third]["_http"]["not_modified_at"]


def test_a_price_change_lands_in_the_history_once_with_its_previous_value(write_source, inc_site, harvest) -> None:
    source = details_source(write_source, inc_site, "inc_history", range(1, 11),
                            output={"key": ["url"], "history": True, "history_retention_days": 30})
    harvest.run(source, "run-1")
    original = harvest.records(source)[f"{inc_site.url}/inc/product/4"]["price"]
    post(f"{inc_site.url}/_inc/price?product=4&price=12.34")
    second = harvest.run(source, "run-2")
    assert second["records_changed"] == 1
    harvest.run(source, "run-3")  # nothing changed since: no new entry
    history = harvest.database[history_collection_name(source)]
    entries = list(history.find({}, {"_id": 0}))
    assert len(entries) == 1, entries
    entry = entries[0]
    assert entry["key"] == {"url": f"{inc_site.url}/inc/product/4"} and entry["run_id"] == "run-2"
    assert entry["fields"] == ["price"]
    assert entry["previous"] == {"price": original} and entry["values"] == {"price": 12.34}
    record = harvest.records(source)[f"{inc_site.url}/inc/product/4"]
    assert record["changed_at"] == entry["changed_at"]
    ttl = history.index_information()["harvester_history_ttl"]
    assert ttl["expireAfterSeconds"] == 30 * 86400


def test_sitemap_index_with_gzip_children_and_lastmod(write_source, inc_site, harvest) -> None:
    site = inc_site.url
    source = write_source("inc_sitemaps", input={"sitemaps": [f"{site}/inc/sitemap.xml?products=60&per_file=25"]},
                          listing={"follow": DETAILS_FOLLOW}, harvesting_lag=0)
    first = harvest.run(source, "run-1")
    assert first["records_new"] == 60, json.dumps(first, default=str)
    assert first["sitemaps"]["sitemaps_read"] == 4  # the index and its three gzip files
    assert first["sitemaps"]["sitemap_urls_queued"] == 60 and first["sitemap_problems"] == []
    post(f"{site}/_inc/price?product=33&price=5.5")
    post(f"{site}/_stats/reset")
    time.sleep(1.1)  # harvesting_lag 0 still keeps a URL's seen-mark for a second
    second = harvest.run(source, "run-2")
    # lastmod says only product 33 changed since its last harvest: only it is fetched, although the lag is 0
    assert second["sitemaps"]["sitemap_unchanged"] == 59, json.dumps(second, default=str)
    assert second["sitemaps"].get("sitemap_urls_queued") == 1, json.dumps(second, default=str)
    paths = inc_site.requests_of(source.name)["paths"]
    assert [path for path in paths if "/inc/product/" in path] == ["/inc/product/33"]
    assert harvest.records(source)[f"{site}/inc/product/33"]["price"] == 5.5
    assert second["records_changed"] == 1


def test_sitemaps_from_robots_txt(write_source, inc_site, harvest) -> None:
    site = inc_site.url
    source = write_source("inc_robots_sitemaps", input={"seeds": [f"{site}/inc/product/1"],
                                                        "sitemaps_from_robots": True, "kind": "details"},
                          listing=None, harvesting_lag=0)
    report = harvest.run(source, "run-1")
    # robots.txt names /inc/sitemap.xml (the site's 500 products in 200-entry files)
    assert report["sitemaps"]["sitemaps_read"] == 1 + 1 + 3, json.dumps(report, default=str)
    assert report["records_stored"] == 500


def test_hostile_sitemaps_are_bounded_and_named_in_the_report(write_source, inc_site, harvest, redis_client) -> None:
    site = inc_site.url
    hostile = [f"{site}/inc/hostile/huge.xml?mb=50", f"{site}/inc/hostile/self-index.xml",
               f"{site}/inc/hostile/bomb.xml", f"{site}/inc/hostile/gzip-bomb.xml.gz?mb=1024",
               f"{site}/inc/hostile/deep/0.xml"]
    source = write_source("inc_hostile_sitemaps", input={"sitemaps": hostile}, retries=0,
                          listing={"follow": DETAILS_FOLLOW, "max_new_urls": 100}, harvesting_lag=0, timeout=60)
    started = time.monotonic()
    report = harvest.run(source, "run-1", timeout=240)
    elapsed = time.monotonic() - started
    problems = {entry["url"]: entry["problem"] for entry in report["sitemap_problems"]}
    said = json.dumps({"elapsed_seconds": round(elapsed, 1), "report": report}, default=str)  # what a failure shows
    assert "more than 50000 entries" in problems.get(hostile[0], ""), said  # cut at the cap, long before 50 MB
    assert problems.get(hostile[1]) == "lists itself", said
    assert "document type declaration" in problems.get(hostile[2], ""), said
    assert "larger than" in problems.get(hostile[3], ""), said
    assert "deeper than sitemap_max_depth (3)" in problems.get(f"{site}/inc/hostile/deep/3.xml", ""), said
    assert report["failures_by_reason"] == {"sitemap refused": 1}, said  # the bomb is dead-lettered, the rest used
    assert report["sitemaps"]["sitemaps_read"] == 8, said  # huge, the index and its child, the gzip bomb, 4 levels
    assert report["sitemaps"]["sitemap_urls_queued"] == 100, said  # max_new_urls held
    assert report["sitemaps"]["sitemap_over_max_new_urls"] > 0 and report["records_stored"] == 100, said
    assert elapsed < 200, said


def test_the_demo_site_serves_its_other_pages_while_it_builds_a_gzip_sitemap_bomb(inc_site) -> None:
    """The demo's gzip sitemap bomb takes seconds of CPU to build on its first request: built in a thread, so the
    site's other pages (the same run's other sitemaps among them) are served meanwhile. Built on the event loop, a
    product asked for during the build waited for all of it (and a loaded CI machine stretched that to a run's
    timeout)."""
    import threading

    ended: dict[str, float] = {}

    def fetch(name: str, path: str) -> None:
        with urllib.request.urlopen(f"{inc_site.url}{path}", timeout=120) as response:
            response.read()
        ended[name] = time.monotonic()

    bomb = threading.Thread(target=fetch, args=("bomb", "/inc/hostile/gzip-bomb.xml.gz?mb=400"))  # a size no
    bomb.start()  # other test asks for, so it is built here (about a second of CPU)
    time.sleep(0.3)  # the bomb's request reaches the site first
    fetch("product", "/inc/product/1")
    bomb.join()
    assert ended["product"] < ended["bomb"]
