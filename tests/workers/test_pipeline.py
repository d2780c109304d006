"""One flow for a batch whatever renders it: the HTTP fetcher and the browser host meet one contract."""

from __future__ import annotations

import pytest
import yaml
from harvester.config.loader import load_source_file
from harvester.distributor import TaskMessage
from harvester.pageslots.host import BrowserPageFetcher
from harvester.scraping.fetching.fetcher import Fetcher
from harvester.scraping.fetching.page_fetcher import PageFetcher
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source
from tests.pageslots.test_browser_host import browser_source_document


@pytest.mark.unit
def test_the_deadline_of_a_batch_is_its_fetchers_longest_fetching_plus_two_leases() -> None:
    settings = HarvesterSettings(lease_seconds=10, page_slot_give_up_after_failures=3,
                                 page_slot_retry_delay_seconds=0.5)
    source = demo_source("http://127.0.0.1:9", timeout=4)
    fetcher = Fetcher(settings)
    assert isinstance(fetcher, PageFetcher)
    # concurrent: one timeout whatever the batch size, after robots.txt (once per host, one timeout at most)
    assert fetcher.fetch_seconds(source, 50) == 4 + 4
    assert fetcher.fetch_seconds(source.model_copy(update={"robots": "ignore"}), 50) == 4
    browser = BrowserPageFetcher(settings)  # its browser host starts on the first fetch, not here
    assert isinstance(browser, PageFetcher)
    # one after the other, each up to 3 attempts of its timeout, its readiness wait (10 s) and the retry delay
    assert browser.fetch_seconds(source, 5) == 5 * 3 * (4 + 10 + 0.5)


@pytest.mark.integration
def test_a_browser_batch_runs_the_same_flow_in_process(worker_settings: HarvesterSettings, runner, redis_client,
                                                       demo_site, mongo_server) -> None:
    """The runner renders through the page slot's host, then settles exactly as for HTTP pages."""
    document = browser_source_document(demo_site.url, "pipeline_browser")
    path = worker_settings.sources_dir / "pipeline_browser.yaml"
    path.write_text(yaml.safe_dump(document))
    source = load_source_file(path)  # registered by the push below, as the producer does
    from tests.workers.conftest import Crawl

    crawl = Crawl(runner, redis_client)
    crawl.push(source, *(TaskMessage(source=source.name, url=f"{demo_site.url}{path}")
                         for path in ("/js/product/8", "/product/99999")))
    admitted = crawl.store.admit(source.name, 2).deliveries()
    report = runner.run(admitted)
    assert isinstance(runner.fetcher_for(source), BrowserPageFetcher)
    assert (report["stored"], report["dead"]) == (1, 1)
    outcomes = report["outcomes"]
    assert outcomes["ok"] == 1 and outcomes["http_404"] == 1 and outcomes["records_stored"] == 1
    # the product page's stylesheet, font and photo, and the 404 page's stylesheet and font: all blocked
    assert {kind: outcomes[f"browser_blocked:{kind}"] for kind in ("stylesheet", "font", "image")} == {
        "stylesheet": 2, "font": 2, "image": 1}
    assert outcomes["browser_blocked_requests"] == 5 and outcomes["browser_transferred_bytes"] > 0
    record = mongo_server.client()[worker_settings.mongo_database][source.output_collection].find_one()
    assert record["sku"] == "SKU-00008"
    assert crawl.store.stats([source.name])[source.name].active == 0
