"""What a sitemap found becomes new tasks, the way a listing page's links do.

- The sitemaps an index lists become ``sitemap`` tasks, each read once per run (the run's frontier; an
  index that lists itself, or a parent, is not read again), at most ``sitemap_max_depth`` levels below
  the sitemaps the source names and ``sitemap_max_files_per_run`` files a run.
- Its pages pass ``listing.follow`` (in the discovery), then the ``lastmod`` check: a page whose record was
  harvested at or after its ``lastmod`` is skipped, even past the harvesting lag (``sitemap_unchanged``);
  then the address guard and robots.txt, the duplicate-URL checker (the lag) and the run's
  ``max_new_urls`` (``listing.max_new_urls``, or its default without a listing section), and become
  ``details`` tasks of the sitemap's package.
- At most ``sitemap_max_urls_per_run`` entries are read in a run; past it a file's entries are dropped.
- A sitemap that was cut (a cap) is used as far as it was read; one refused (a DOCTYPE, not a sitemap)
  is dead-lettered with the reason. Both are named in the run's report (``sitemap_problems``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from harvester.config import Listing, SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import StorageError
from harvester.redis_keys import SourceKeys
from harvester.scraping import PageResult, SitemapDiscovery
from harvester.settings import HarvesterSettings
from harvester.storage import DataHandler, RunFigures, RunFrontier, URLStore
from harvester.workers.failures import FailurePolicy
from harvester.workers.follower import LinkFollower, child_task
from harvester.workers.report import BatchReport

if TYPE_CHECKING:
    from harvester.workers.clients import WorkerClients

log = logging.getLogger(__name__)
DEFAULT_MAX_NEW_URLS = Listing.model_fields["max_new_urls"].default


class SitemapFollower:
    """Sitemap page → child sitemaps and detail tasks, under every cap, counted per run."""

    def __init__(self, settings: HarvesterSettings, links: LinkFollower, urls: URLStore, frontier: RunFrontier,
                 data: DataHandler, figures: RunFigures, failures: FailurePolicy) -> None:
        self.settings = settings
        self.links = links
        self.urls = urls
        self.frontier = frontier
        self.data = data
        self.figures = figures
        self.failures = failures

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, clients: WorkerClients, links: LinkFollower,
                      failures: FailurePolicy) -> SitemapFollower:
        return cls(settings, links, clients.urls, clients.frontier, clients.data, RunFigures(clients.redis), failures)

    def follow_all(self, source: SourceConfig, pages: list[tuple[TaskMessage, PageResult]],
                   report: BatchReport) -> list[TaskMessage]:
        """Follow each sitemap; the tasks that are done (a refused one is dead-lettered, a fault retried)."""
        done: list[TaskMessage] = []
        for message, page in pages:
            discovery = page.discovery
            if not isinstance(discovery, SitemapDiscovery) or discovery.refused:
                problem = discovery.problem if isinstance(discovery, SitemapDiscovery) else "no sitemap was read"
                report.outcomes["sitemap_refused"] += 1
                self._count(source, message, {"sitemaps_refused": 1}, [(message.url, problem)])
                self.failures.dead_letter(message, f"sitemap refused: {problem}", report)
                continue
            try:
                self.follow(source, message, discovery, report)
            except Exception as error:  # Redis or MongoDB down: this sitemap goes back for a retry
                log.exception("following the sitemap %s failed", message.url)
                self.failures.retry(message, f"sitemap discovery failed: {type(error).__name__}: {error}", None,
                                    report)
                continue
            done.append(message)
        return done

    def follow(self, source: SourceConfig, message: TaskMessage, discovery: SitemapDiscovery,
               report: BatchReport) -> None:
        figures = {"sitemaps_read": 1, "sitemap_entries": discovery.entries}
        problems: list[tuple[str, str]] = []
        if discovery.problem:
            report.outcomes["sitemap_cut"] += 1
            figures["sitemaps_cut"] = 1
            problems.append((message.url, discovery.problem))
        for reason, amount in discovery.ignored.items():
            report.outcomes[f"links_ignored:{reason}"] += amount
        if discovery.ignored.get("off_site"):  # entries on another site than the sitemap's: dropped, and said so
            figures["sitemap_off_site"] = discovery.ignored["off_site"]
        keys = SourceKeys(source.name)
        granted = self.figures.reserve(keys.run_sitemap_entries(message.run_id), discovery.entries,
                                       self.settings.sitemap_max_urls_per_run)
        pages, children = discovery.details, discovery.listings
        if granted < discovery.entries:
            figures["sitemap_entries_over_run_cap"] = discovery.entries - granted
            problems.append((message.url, f"the run read {self.settings.sitemap_max_urls_per_run} sitemap entries "
                                          f"(sitemap_max_urls_per_run): {discovery.entries - granted} of this "
                                          "file's entries were dropped"))
            budget = granted
            children, pages = children[:budget], pages[: max(0, budget - len(children))]
        self._queue_sitemaps(source, message, children, figures, problems, report)
        self._queue_pages(source, message, pages, discovery.lastmod, figures, report)
        self._count(source, message, figures, problems)

    def _queue_sitemaps(self, source: SourceConfig, message: TaskMessage, urls: list[str], figures: dict[str, int],
                        problems: list[tuple[str, str]], report: BatchReport) -> None:
        if not urls:
            return
        if message.depth + 1 > self.settings.sitemap_max_depth:
            figures["sitemaps_beyond_depth"] = len(urls)
            problems.append((message.url, f"an index nested deeper than sitemap_max_depth ("
                                          f"{self.settings.sitemap_max_depth}): its {len(urls)} sitemaps are not read"))
            return
        # this sitemap marks itself first: an index that lists itself (or is listed again) is read once a run
        self.frontier.new_listing_pages(source.name, message.run_id, [message.url], owner=message.task_id)
        repeated = [url for url in urls if url == message.url]
        new = self.frontier.new_listing_pages(source.name, message.run_id,
                                              [url for url in urls if url != message.url], owner=message.task_id)
        if repeated or len(new) < len(urls):
            figures["sitemaps_repeated"] = len(urls) - len(new)
            problems.append((message.url, "lists itself" if repeated else
                             f"lists {len(urls) - len(new)} sitemaps already read in this run"))
        granted = self.figures.reserve(SourceKeys(source.name).run_sitemaps(message.run_id), len(new),
                                       self.settings.sitemap_max_files_per_run)
        if granted < len(new):
            figures["sitemaps_over_run_cap"] = len(new) - granted
            problems.append((message.url, f"the run reached sitemap_max_files_per_run "
                                          f"({self.settings.sitemap_max_files_per_run}): {len(new) - granted} "
                                          "sitemaps are not read"))
            new = new[:granted]
        self.links.queue(source, message, [child_task(source, message, url, "sitemap") for url in new], report)
        figures["sitemaps_queued"] = len(new)

    def _queue_pages(self, source: SourceConfig, message: TaskMessage, urls: list[str], lastmod: dict[str, datetime],
                     figures: dict[str, int], report: BatchReport) -> None:
        figures["sitemap_urls"] = len(urls)
        authority = None if self.data.discarding else self.data.collection(source)
        if authority is not None and lastmod:
            unchanged = self._unchanged_since_harvest(authority, [url for url in urls if url in lastmod], lastmod)
            if unchanged:
                figures["sitemap_unchanged"] = len(unchanged)
                report.outcomes["links_ignored:sitemap_unchanged"] += len(unchanged)
                urls = [url for url in urls if url not in unchanged]
        candidates = self.links.screen_addresses(urls, report)
        details = self.urls.filter_new(source, candidates, owner=message.task_id, authority=authority)
        report.outcomes["links_duplicate"] += len(candidates) - len(details)
        cap = source.listing.max_new_urls if source.listing is not None else DEFAULT_MAX_NEW_URLS
        granted = self.frontier.reserve_new_urls(source.name, message.run_id, len(details), cap)
        if granted < len(details):
            report.outcomes["links_over_max_new_urls"] += len(details) - granted
            figures["sitemap_over_max_new_urls"] = len(details) - granted
            self.urls.forget(source, details[granted:])
            details = details[:granted]
        allowed = self.links.screen_robots(source, details, report)  # after the cap: robots.txt reads few
        if len(allowed) < len(details):
            kept = set(allowed)
            self.urls.forget(source, [url for url in details if url not in kept])
            self.frontier.give_back_new_urls(source.name, message.run_id, len(details) - len(allowed))
            details = allowed
        self.links.queue(source, message, [child_task(source, message, url, "details") for url in details], report)
        figures["sitemap_urls_queued"] = len(details)

    @staticmethod
    def _unchanged_since_harvest(authority, urls: list[str], lastmod: dict[str, datetime]) -> set[str]:
        """URLs whose record was harvested at or after the sitemap's lastmod (one $in query per 1,000)."""
        unchanged: set[str] = set()
        for start in range(0, len(urls), 1000):
            chunk = urls[start:start + 1000]
            for document in authority.find({"url": {"$in": chunk}}, {"_id": 0, "url": 1, "harvested_at": 1}):
                harvested = document.get("harvested_at")
                modified = lastmod.get(document["url"])
                if harvested is None or modified is None:
                    continue
                if harvested.tzinfo is None:
                    harvested = harvested.replace(tzinfo=modified.tzinfo)
                if modified <= harvested:
                    unchanged.add(document["url"])
        return unchanged

    def _count(self, source: SourceConfig, message: TaskMessage, figures: dict[str, int],
               problems: list[tuple[str, str]]) -> None:
        try:
            self.figures.add(source.name, message.run_id, figures, problems)
        except StorageError as error:  # a figure lost never fails the work it counts
            log.warning("%s: counting the sitemap figures of %s failed: %s", source.name, message.url, error)

