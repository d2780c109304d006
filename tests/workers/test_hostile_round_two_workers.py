"""The worker side of hostile sites beyond the first caps, against real Redis and MongoDB and two real hosts (the
site on 127.0.0.1, an attacker on 127.0.0.2): a listing's links to the attacker never carry the source's
credentials or cookies, next-page links stay on the site, a run's listing pages are capped, and link screening's
bounds are counted apart from refused addresses. Each failed on the code before the fix."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from harvester.config.model import SourceConfig
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping.discovery.links import Discovery
from harvester.scraping.fetching.addresses import AddressGuard
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.scraping.page import PageResult
from harvester.storage.data_handler import DataHandler
from harvester.storage.url_store import RunFrontier, URLStore
from harvester.workers.batch import BatchRunner
from harvester.workers.follower import LinkFollower
from harvester.workers.report import BatchReport

from tests.fixtures.demo_site import demo_source, demo_source_document
from tests.fixtures.hostile_hosts import ALLOW_BOTH
from tests.workers.conftest import Crawl

pytestmark = pytest.mark.integration


def follower(redis_client, settings, **options) -> LinkFollower:
    return LinkFollower(URLStore(redis_client), RunFrontier(redis_client), Intake(redis_client, settings),
                        DataHandler(settings), packages=lambda: pytest.fail("no package in these runs"), **options)


def listing_page(url: str, details: list[str], listings: list[str]) -> PageResult:
    return PageResult(FetchResult(url, "ok", final_url=url, status=200), "listing", url,
                      discovery=Discovery(details, listings, {}))


def test_a_runs_listing_pages_are_capped_across_its_pages(redis_client, configure_settings) -> None:
    """One 5 MB page queued 116,391 listing tasks: a run now discovers at most max_listing_pages_per_run."""
    settings = configure_settings(output_sink="discard", max_listing_pages_per_run=3)
    source = demo_source("http://shop.example", "pages_capped")
    capped = LinkFollower.from_settings(settings, _Clients(redis_client, settings))
    report = BatchReport(source.name)
    for number, pages in enumerate(([2, 3], [4, 5])):
        parent = TaskMessage(task_id=f"p{number}", source=source.name, kind="listing", url="http://shop.example/shop",
                             run_id=None)
        capped.follow(source, parent, listing_page(parent.url, [], [f"http://shop.example/shop?page={n}"
                                                                    for n in pages]), report)
    queued = redis_client.lrange(SourceKeys(source.name).intake, 0, -1)
    assert len(queued) == 3
    assert report.outcomes["links_ignored:over_listing_pages_per_run"] == 1


class _Clients:
    """What LinkFollower.from_settings takes of WorkerClients, on the test's Redis (discard sink: no MongoDB)."""

    def __init__(self, redis_client, settings) -> None:
        self.urls, self.frontier = URLStore(redis_client), RunFrontier(redis_client)
        self.intake, self.data = Intake(redis_client, settings), DataHandler(settings)

    @property
    def packages(self):
        raise AssertionError("no package in these runs")


def test_screening_bounds_are_counted_apart_from_refused_addresses(redis_client, configure_settings) -> None:
    settings = configure_settings(output_sink="discard")
    guard = AddressGuard(())
    screened = follower(redis_client, settings,
                        refusals=lambda urls: asyncio.run(guard.refusals(urls, max_hosts=2, budget_seconds=5)))
    source = demo_source("http://shop.example", "screened", listing={"link_selectors": ["a"], "follow": "."})
    report = BatchReport(source.name)
    links = ["http://127.0.0.1/a", "http://93.184.215.14/b", "http://93.184.215.15/c", "http://93.184.215.16/d"]
    parent = TaskMessage(task_id="s", source=source.name, kind="listing", url="http://shop.example/shop")
    screened.follow(source, parent, listing_page(parent.url, links, []), report)
    assert report.outcomes["links_ignored:address_refused"] == 1
    assert report.outcomes["links_ignored:too_many_hosts"] == 2


def test_a_listing_that_links_another_host_gives_it_no_credentials_cookies_or_pages(
        site, attacker, redis_client, mongo_server, configure_settings, monkeypatch) -> None:
    settings = configure_settings(allowed_private_networks=ALLOW_BOTH, retry_base_seconds=0.2, retry_max_seconds=1,
                                  heartbeat_seconds=1, lease_seconds=30)
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_LOGIN", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": site.port, "schema": "http", "login": "crawler",
        "password": "pa55", "extra": {"headers": {"X-Api-Key": "k-123"}, "cookies": {"session": "s-456"}}}))
    product = "<html><body><span class='sku'>SKU-1</span><h1 class='title'>t</h1></body></html>"
    site.route("/shop", text=(f"<a class='product-link' href='{site.url}/product/1'>1</a>"
                              f"<a class='product-link' href='{attacker.url}/product/2'>2</a>"
                              f"<a class='next' href='{attacker.url}/shop?page=2'>next</a>"
                              f"<a class='next' href='{site.url}/shop2'>next</a>"),
               content_type="text/html", headers={"Set-Cookie": "visit=v-1; Path=/"})
    site.route("/shop2", text="<p>end</p>", content_type="text/html")
    site.route("/product/1", text=product, content_type="text/html")
    attacker.route("/product/2", text=product, content_type="text/html")
    document = demo_source_document(site.url, "bound_crawl", http_connection_id="shop_login", robots="ignore",
                                    listing={"link_selectors": ["a.product-link"], "next_page_selectors": ["a.next"],
                                             "follow": ".*", "max_depth": 3})
    (settings.sources_dir / "bound_crawl.yaml").write_text(yaml.safe_dump(document))
    source = SourceConfig.model_validate(document)
    runner = BatchRunner(settings)
    try:
        crawl = Crawl(runner, redis_client)
        crawl.push(source, TaskMessage(task_id="seed", source=source.name, kind="listing", url=f"{site.url}/shop"))
        for _ in range(6):
            crawl.step(source)
    finally:
        runner.close()
    assert "/shop?page=2" not in attacker.paths(), attacker.paths()  # a next page off the site is not followed
    assert "/shop2" in site.paths()
    stolen = attacker.headers_of("/product/2")
    assert stolen, attacker.paths()
    assert not any(key in stolen[0] for key in ("authorization", "x-api-key", "cookie")), stolen[0]
    own = site.headers_of("/product/1")[0]
    assert own.get("x-api-key") == "k-123" and "session=s-456" in own["cookie"] and "visit=v-1" in own["cookie"]
    counters = RateLimitStore(redis_client, settings).counters(source.name)
    assert counters.get("outcome:links_ignored:not_followed") == 1
