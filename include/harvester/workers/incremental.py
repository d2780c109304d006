"""The worker's side of incremental harvests: conditional requests and sitemap fetches.

Before an HTTP batch is fetched, ONE query reads the validators stored with the records of its detail
pages (``_http``: ETag, Last-Modified); those pages are fetched with If-None-Match / If-Modified-Since.
A 304 (``not_modified``) costs no body: its record is kept and refreshed (``harvested_at``, ``run_id``)
with one update per batch, the bytes its last body had are counted as saved. A site that ignores the
headers answers 200 and the page is handled as any other; a site that sends no validators gets none.
A 304 to a request that was not conditional refreshes nothing (no record has that URL's validators).

Sitemap tasks (``kind: sitemap``) are fetched by the :class:`~harvester.scraping.discovery.sitemaps.SitemapFetcher`,
the same HTTP fetcher with the sitemap body reader; listing pages are never conditional (their links are
read every run).
"""

from __future__ import annotations

import functools
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import StorageError
from harvester.scraping import (
    FetchedBatch,
    Fetcher,
    FetchPermit,
    FetchResult,
    PageFetcher,
    PageResult,
    SitemapFetcher,
    record_url,
)
from harvester.settings import HarvesterSettings
from harvester.storage import DataHandler, URLStore, conditional_headers, validators_of
from harvester.workers.failures import FailurePolicy
from harvester.workers.report import BatchReport

log = logging.getLogger(__name__)

__all__ = ["BatchFetcher", "IncrementalFetching", "refresh_not_modified", "with_validators"]


def with_validators(record: dict[str, Any], page: PageResult) -> dict[str, Any]:
    """A detail page's record with the validators of its response (kept for the next visit)."""
    if page.kind != "details":
        return record
    validators = validators_of(page.fetch.etag, page.fetch.last_modified, page.fetch.size)
    return record if validators is None else {**record, "_http": validators}


class BatchFetcher:
    """One batch's :class:`PageFetcher`: sitemaps through the sitemap fetcher, detail pages whose records
    have validators conditionally, requests with a method and a body as their task says, everything else as
    the page fetcher fetches it."""

    def __init__(self, pages: Fetcher, sitemaps: SitemapFetcher, messages: Sequence[TaskMessage],
                 validators: dict[str, dict[str, Any]]) -> None:
        self.pages = pages
        self.sitemaps = sitemaps
        self.messages = list(messages)
        self.validators = validators

    def fetch_seconds(self, source: SourceConfig, pages: int) -> float:
        return self.pages.fetch_seconds(source, pages)

    async def aclose(self) -> None:
        """The fetchers are the worker's: they outlive the batch."""

    async def fetch_all(self, urls: Sequence[str], source: SourceConfig, permit: FetchPermit | None = None
                        ) -> FetchedBatch:
        outcomes: Counter[str] = Counter()
        batch = await FetchedBatch.gathered(
            self.fetch_page(index, url, source, None if permit is None else functools.partial(permit, index), outcomes)
            for index, url in enumerate(urls))
        batch.outcomes.update(outcomes)
        batch.outcomes.update(self.pages.robots.take_outcomes())  # as the page fetcher's own batches report them
        return batch

    async def fetch_page(self, index: int, url: str, source: SourceConfig, ready: Callable[[], Awaitable[bool]] | None,
                         outcomes: Counter[str]) -> FetchResult:
        """The page of message ``index`` on its own (a refilling batch settles each page as it ends); the
        counters of its fetching (bytes saved, conditions ignored) go to ``outcomes``."""
        message = self.messages[index]
        if message.kind == "sitemap":
            return await self.sitemaps.fetch(url, source, ready)
        stored = self.validators.get(record_url(url)) if message.kind == "details" and not message.refetch else None
        conditions = conditional_headers(stored)
        result = await self.pages.fetch(url, source, ready, conditions=conditions or None, request=message.request)
        if result.outcome == "not_modified" and stored is not None:
            outcomes["bytes_saved"] += int(stored.get("bytes") or 0)
        elif conditions:
            outcomes["conditional_ignored" if result.ok else "conditional_failed"] += 1
        return result


class IncrementalFetching:
    """Makes the batch fetcher of an HTTP batch that has sitemaps or detail pages with stored validators."""

    def __init__(self, data: DataHandler, pages: Fetcher, sitemaps: SitemapFetcher) -> None:
        self.data = data
        self.pages = pages
        self.sitemaps = sitemaps

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, data: DataHandler, pages: Fetcher) -> IncrementalFetching:
        return cls(data, pages, SitemapFetcher(settings, pages))

    def fetcher(self, source: SourceConfig, messages: Sequence[TaskMessage], fetcher: PageFetcher,
                config_version: str | None = None) -> PageFetcher:
        """``fetcher`` itself for a browser batch or one with nothing incremental in it. Validators are read only
        for records ``config_version`` extracted (a config change refetches and re-extracts every page), and
        never for tasks a manual trigger asked to harvest again now (``refetch``)."""
        if fetcher is not self.pages or source.render != "http":
            return fetcher
        details = [record_url(message.url) for message in messages if message.kind == "details" and not message.refetch]
        # sitemaps, and requests with a method and a body, are fetched by the batch fetcher, message by message
        by_message = any(message.kind == "sitemap" or message.request is not None for message in messages)
        validators: dict[str, dict[str, Any]] = {}
        if details:
            try:
                validators = self.data.validators(source, details, config_version)
            except StorageError as error:  # the pages are fetched in full instead: slower, never wrong
                log.warning("%s: reading the stored validators failed (%s): fetching unconditionally",
                            source.name, error)
        if not validators and not by_message:
            return fetcher
        return BatchFetcher(self.pages, self.sitemaps, messages, validators)


def refresh_not_modified(data: DataHandler, urls: URLStore, failures: FailurePolicy, source: SourceConfig,
                         pages: list[tuple[TaskMessage, PageResult]], report: BatchReport) -> list[TaskMessage]:
    """Refresh the records of the batch's 304 pages (one update per run); the tasks that are done.

    A refresh that fails (MongoDB down) sends its tasks back for a retry, as a failed write does."""
    by_run: dict[str | None, list[tuple[TaskMessage, PageResult]]] = defaultdict(list)
    for message, page in pages:
        by_run[message.run_id].append((message, page))
    done: list[TaskMessage] = []
    refreshed = 0
    now = datetime.now(UTC)
    for run_id, group in by_run.items():
        try:
            refreshed += data.refresh_not_modified(source, [page.url for _, page in group], run_id, now)
            if not data.discarding:
                urls.mark_seen(source, [page.url for _, page in group])
        except StorageError as error:
            report.outcomes["storage_error"] += len(group)
            for message, _ in group:
                failures.retry(message, f"storage failed: {type(error).__name__}: {error}", None, report)
            continue
        done += [message for message, _ in group]
    if refreshed:
        report.outcomes["records_not_modified"] += refreshed
    return done
