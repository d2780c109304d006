"""A batch's fetching that fails (the worker's own stores, never a site: a page's fetch raised StorageError) cancels
its other pages before the failure propagates. With ``asyncio.gather`` alone they went on running in the worker's
long-lived loop, into its next batch, fetching for a batch that had failed (its leases left to expire)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import StorageError, StorageUnavailableError
from harvester.scraping import FetchResult, SitemapFetcher
from harvester.scraping.fetching import Fetcher
from harvester.settings import HarvesterSettings
from harvester.workers.incremental import BatchFetcher

from tests.fixtures.demo_site import demo_source_document

pytestmark = pytest.mark.unit

SOURCE = SourceConfig.model_validate(demo_source_document("http://shop.example", "fetch_all_failure"))
URLS = ["http://shop.example/fails", "http://shop.example/slow"]


@pytest.mark.parametrize("incremental", [False, True], ids=["page_fetcher", "batch_fetcher"])
def test_a_page_whose_fetch_raises_cancels_the_batchs_other_pages(incremental) -> None:
    settings = HarvesterSettings()
    pages = Fetcher.from_settings(settings)
    ended: dict[str, str] = {}

    async def fetch(url: str, source: SourceConfig, ready: Any = None, **_: Any) -> FetchResult:
        if url.endswith("/fails"):
            raise StorageUnavailableError("Redis: connection refused")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ended[url] = "cancelled"
            raise
        ended[url] = "fetched"
        return FetchResult(url, "ok")

    pages.fetch = fetch  # type: ignore[method-assign]  # the page fetcher's one page, as the site cannot fail it
    messages = [TaskMessage(source=SOURCE.name, url=url) for url in URLS]
    fetcher = (BatchFetcher(pages, SitemapFetcher(settings, pages), messages, {"unused": {}}) if incremental
               else pages)

    async def scenario() -> None:
        with pytest.raises(StorageError):
            await fetcher.fetch_all(URLS, SOURCE)
        left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        assert left == [] and ended == {URLS[1]: "cancelled"}
        await pages.aclose()

    asyncio.run(scenario())
