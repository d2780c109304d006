"""One Celery message = one batch of admitted tasks of ONE source, run concurrently in one asyncio loop.

The order is the contract of DESIGN.md section 1: fetch all pages (heartbeating the leases), extract,
write every record with one ``bulk_write``, and only THEN release the leases and count the packages
down. Discovered links are added to their package before they are pushed to intake, and before the
listing page that found them completes, so a package never finishes with work still to come.
Every task ends stored, retried (``RateLimitStore.fail``) or dead-lettered with a reason; nothing a
site does raises out of here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from harvester.config.model import SourceConfig
from harvester.connections import MONGO_DEFAULT, REDIS_DEFAULT, mongo_client, redis_client
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.distributor.hosts import host_of
from harvester.scraping.fetcher import Fetcher, FetchResult
from harvester.scraping.page import PageResult, process_page
from harvester.settings import HarvesterSettings, get_settings
from harvester.storage.data_handler import DataHandler
from harvester.storage.url_store import RunFrontier, URLStore, url_digest

log = logging.getLogger(__name__)
SOURCE_CACHE_SECONDS = 30.0
DEFAULT_RETRY_AFTER_SECONDS = 30.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (it is, with uvicorn): less CPU per request than the default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def discovered_task_id(source: str, run_id: str | None, package_id: int | None, url: str) -> str:
    """Deterministic, so a listing page processed twice discovers the very same tasks."""
    if run_id is not None and package_id is not None:
        from harvester.storage.packages import planned_task_id

        return planned_task_id(source, run_id, package_id, url)
    return url_digest(f"{source}\x1f{run_id}\x1f{url}")


@dataclass
class BatchReport:
    """What a batch did, returned by the Celery task (and logged)."""

    source: str
    tasks: int = 0
    stored: int = 0
    retried: int = 0
    dead: int = 0
    discovered: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "tasks": self.tasks, "stored": self.stored, "retried": self.retried,
                "dead": self.dead, "discovered": self.discovered, "outcomes": dict(self.outcomes)}


class LeaseHeartbeat:
    """Extends the batch's leases every ``interval`` seconds from a thread, for as long as the batch runs
    (fetching AND storing: a slow bulk_write must not let the reaper hand the tasks to another worker).
    Heartbeating a released task does nothing, so it may run until the very end."""

    def __init__(self, store: RateLimitStore, source: str, task_ids: list[str], interval: float,
                 max_seconds: float | None = None) -> None:
        self.store, self.source, self.task_ids, self.interval = store, source, task_ids, interval
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{source}", daemon=True)

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        """Beat until stopped, or until ``max_seconds``: a batch stuck past every timeout stops being
        vouched for, so its leases expire and the reaper gives the tasks to another worker."""
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        while not self._stop.wait(self.interval):
            if deadline is not None and time.monotonic() > deadline:
                log.warning("batch of %s still running after %.0fs: no more heartbeats", self.source,
                            self.max_seconds)
                return
            try:
                self.store.heartbeat(self.source, self.task_ids)
            except redis.RedisError as error:
                log.warning("heartbeat of %s failed: %s", self.source, error)


class SourceCache:
    """Source configs read from YAML, re-read after a short time so edits reach running workers."""

    def __init__(self, directory: Path, ttl: float = SOURCE_CACHE_SECONDS) -> None:
        self.directory = directory
        self.ttl = ttl
        self._entries: dict[str, tuple[float, SourceConfig]] = {}

    def get(self, name: str) -> SourceConfig:
        from harvester.config.loader import get_source, load_source_file

        entry = self._entries.get(name)
        if entry is not None and time.monotonic() - entry[0] < self.ttl:
            return entry[1]
        source = None
        for suffix in (".yaml", ".yml"):  # the usual layout, <name>.yaml: one file, not the whole directory
            path = self.directory / f"{name}{suffix}"
            if path.is_file():
                source = load_source_file(path)
                break
        if source is None or source.name != name:
            source = get_source(name, self.directory)
        self._entries[name] = (time.monotonic(), source)
        return source


class BatchRunner:
    """The per-process state of a worker: clients, the event loop and the pooled HTTP client."""

    def __init__(self, settings: HarvesterSettings | None = None) -> None:
        self.settings = settings or get_settings()
        self.redis = redis_client(REDIS_DEFAULT, self.settings)
        self.store = RateLimitStore(self.redis, self.settings)
        self.intake = Intake(self.redis, self.settings)
        self.urls = URLStore(self.redis)
        self.frontier = RunFrontier(self.redis)
        self.data = DataHandler(self.settings)
        self.sources = SourceCache(self.settings.sources_dir)
        self.loop = new_event_loop()
        self.fetcher = Fetcher(self.settings)
        self._packages: Any = None
        self._browser: Any = None

    @property
    def packages(self) -> Any:
        if self._packages is None:
            from harvester.storage.packages import PackageStore

            self._packages = PackageStore(mongo_client(MONGO_DEFAULT, self.settings)[self.settings.mongo_database])
        return self._packages

    @property
    def browser(self) -> Any:
        """The process's page-slot browser host (launched on the first browser task)."""
        if self._browser is None:
            from harvester.pageslots.host import browser_host

            self._browser = browser_host(self.settings)
        return self._browser

    def close(self) -> None:
        if self._browser is not None:
            with contextlib.suppress(Exception):
                self._browser.close()
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.fetcher.aclose())
        self.loop.close()
        self.redis.close()

    # -- the batch ---------------------------------------------------------------------------------
    def run(self, raw_messages: list[dict[str, Any]]) -> dict[str, Any]:
        messages = [TaskMessage.model_validate(raw) for raw in raw_messages]
        if not messages:
            return BatchReport(source="").as_dict()
        by_source: dict[str, list[TaskMessage]] = defaultdict(list)
        for message in messages:
            by_source[message.source].append(message)
        reports = [self.run_source(name, group) for name, group in by_source.items()]
        if len(reports) == 1:
            return reports[0].as_dict()
        return {"sources": [report.as_dict() for report in reports]}

    def run_source(self, name: str, messages: list[TaskMessage]) -> BatchReport:
        report = BatchReport(source=name, tasks=len(messages))
        try:
            source = self.sources.get(name)
        except Exception as error:  # a broken or deleted YAML file: retry later, never crash
            reason = f"source config {name!r} could not be loaded: {error}"
            for message in messages:
                self._fail(message, reason, None, report, counter="config_error")
            self._count(name, report)
            return report
        if source.render == "browser":
            return self.run_in_browser(source, messages)
        with LeaseHeartbeat(self.store, name, [message.task_id for message in messages],
                            self.settings.heartbeat_seconds, self.batch_deadline(source)):
            pages = self.loop.run_until_complete(self._fetch_all(source, messages))
            self._settle(source, messages, pages, report)
        self._count(name, report)
        return report

    def run_in_browser(self, source: SourceConfig, messages: list[TaskMessage]) -> BatchReport:
        """Render the batch page after page in this process's page slot, then :meth:`finish` it.

        The leases are heartbeaten while the pages render: a slot retrying a failing page may take
        several timeouts, and the reaper must not hand the tasks to another worker meanwhile.
        """
        host = self.browser
        before = host.host.totals.snapshot()
        with LeaseHeartbeat(self.store, source.name, [message.task_id for message in messages],
                            self.settings.heartbeat_seconds, self.browser_batch_deadline(source, len(messages))):
            fetches = host.render_all([message.url for message in messages], source)
        return self.finish(source, messages, fetches, outcomes=host.host.totals.outcomes_since(before))

    def browser_batch_deadline(self, source: SourceConfig, pages: int) -> float:
        """Pages render one after the other, each may be tried up to the slot's give-up threshold."""
        attempts = self.settings.page_slot_give_up_after_failures
        per_attempt = source.timeout + self.settings.page_slot_retry_delay_seconds
        return pages * attempts * per_attempt + 2 * self.settings.lease_seconds

    def finish(self, source: SourceConfig, messages: list[TaskMessage], fetches: list[FetchResult],
               outcomes: Mapping[str, int] | None = None) -> BatchReport:
        """Extract, store, release and count down pages fetched elsewhere (a page slot's browser).

        The same ending as :meth:`run_source`, so browser tasks obey the same order and outcomes;
        ``outcomes`` adds counters of the fetching (blocked requests, bytes transferred).
        """
        report = BatchReport(source=source.name, tasks=len(messages))
        report.outcomes.update(outcomes or {})
        with LeaseHeartbeat(self.store, source.name, [message.task_id for message in messages],
                            self.settings.heartbeat_seconds, self.batch_deadline(source)):
            pages = [process_page(source, m.kind, m.url, m.depth, fetch)
                     for m, fetch in zip(messages, fetches, strict=True)]
            self._settle(source, messages, pages, report)
        self._count(source.name, report)
        return report

    def batch_deadline(self, source: SourceConfig) -> float:
        """How long a batch may be vouched for: every fetch ends by ``source.timeout``, and storing
        gets two leases' worth on top."""
        return source.timeout + 2 * self.settings.lease_seconds

    async def _fetch_all(self, source: SourceConfig, messages: list[TaskMessage]) -> list[PageResult]:
        fetches = await asyncio.gather(*(self.fetcher.fetch(m.url, source) for m in messages))
        return [process_page(source, m.kind, m.url, m.depth, fetch)
                for m, fetch in zip(messages, fetches, strict=True)]

    # -- after fetching ----------------------------------------------------------------------------
    def _settle(self, source: SourceConfig, messages: list[TaskMessage], pages: list[PageResult],
                report: BatchReport) -> None:
        to_store: list[tuple[TaskMessage, PageResult]] = []
        listings: list[tuple[TaskMessage, PageResult]] = []
        finished: list[TaskMessage] = []
        for message, page in zip(messages, pages, strict=True):
            fetch = page.fetch
            report.outcomes[fetch.counter] += 1
            if fetch.truncated:
                report.outcomes["truncated"] += 1
            if fetch.outcome == "not_modified":
                finished.append(message)
            elif not fetch.ok:
                self._fetch_failed(source, message, fetch, report)
            elif page.extraction is not None:
                for problem in page.extraction.problems:
                    report.outcomes[problem.counter] += 1
                if page.extraction.record is None:
                    report.outcomes["rejected"] += 1
                    self._dead(message, f"record rejected: {page.rejected_reason}", report)
                else:
                    to_store.append((message, page))
            else:
                listings.append((message, page))

        if to_store and not self._store(source, to_store, report):
            to_store = []
        followed: list[TaskMessage] = []
        for message, page in listings:
            try:
                self._follow_links(source, message, page, report)
                followed.append(message)
            except Exception as error:  # Redis or MongoDB down: this listing goes back for a retry
                log.exception("following the links of %s failed", message.url)
                self._fail(message, f"link discovery failed: {type(error).__name__}: {error}", None, report)
        done = finished + [message for message, _ in to_store] + followed
        self._complete(source, done, report)

    def _store(self, source: SourceConfig, items: list[tuple[TaskMessage, PageResult]],
               report: BatchReport) -> bool:
        """One bulk_write per run in the batch (usually one); on failure every task is retried."""
        by_run: dict[str | None, list[tuple[TaskMessage, PageResult]]] = defaultdict(list)
        for message, page in items:
            by_run[message.run_id].append((message, page))
        try:
            for run_id, group in by_run.items():
                records = [page.extraction.record for _, page in group if page.extraction and page.extraction.record]
                result = self.data.write(source, records, run_id)
                for position, reason in result.rejected.items():
                    report.outcomes["rejected"] += 1
                    message = group[position][0]
                    items.remove(group[position])
                    self._dead(message, f"record rejected: {reason}", report)
            report.stored += len(items)
            report.outcomes["records_stored"] += len(items)
            if not self.data.discarding:
                self.urls.mark_seen(source, [page.url for _, page in items])
            return True
        except Exception as error:  # the output is unreachable: nothing is lost, the tasks come back
            log.exception("writing %d records of %s failed", len(items), source.name)
            report.outcomes["storage_error"] += len(items)
            for message, _ in items:
                self._fail(message, f"storage failed: {type(error).__name__}: {error}", None, report)
            return False

    def _follow_links(self, source: SourceConfig, message: TaskMessage, page: PageResult,
                      report: BatchReport) -> None:
        """Next listing pages first (they are the crawl's critical path: each one leads to the next),
        then the detail pages that pass the duplicate-URL checker and the run's cap."""
        discovery = page.discovery
        if discovery is None or source.listing is None:
            return
        for reason, amount in discovery.ignored.items():
            report.outcomes[f"links_ignored:{reason}"] += amount
        listings = self.frontier.new_listing_pages(source.name, message.run_id, discovery.listings,
                                                   owner=message.task_id)
        self._queue(source, message, [self._child(source, message, url, "listing") for url in listings], report)
        authority = None if self.data.discarding else self.data.collection(source)
        details = self.urls.filter_new(source, discovery.details, owner=message.task_id, authority=authority)
        report.outcomes["links_duplicate"] += len(discovery.details) - len(details)
        granted = self.frontier.reserve_new_urls(source.name, message.run_id, len(details),
                                                 source.listing.max_new_urls)
        if granted < len(details):
            report.outcomes["links_over_max_new_urls"] += len(details) - granted
            self.urls.forget(source, details[granted:])
            details = details[:granted]
        self._queue(source, message, [self._child(source, message, url, "details") for url in details], report)

    def _queue(self, source: SourceConfig, parent: TaskMessage, children: list[TaskMessage],
               report: BatchReport) -> None:
        """Add discovered tasks to the parent's package, then push them to intake (in that order)."""
        if not children:
            return
        if parent.run_id is not None and parent.package_id is not None:
            self.packages.add_tasks(source.name, parent.run_id, parent.package_id,
                                    [child.task_id for child in children])
        self.intake.push(source, children)
        report.discovered += len(children)
        report.outcomes["links_new"] += len(children)

    @staticmethod
    def _child(source: SourceConfig, parent: TaskMessage, url: str, kind: str) -> TaskMessage:
        return TaskMessage(
            task_id=discovered_task_id(source.name, parent.run_id, parent.package_id, url),
            source=source.name, kind=kind, url=url, depth=parent.depth + 1, run_id=parent.run_id,
            package_id=parent.package_id, country=parent.country or source.country,
        )

    # -- endings -----------------------------------------------------------------------------------
    def _fetch_failed(self, source: SourceConfig, message: TaskMessage, fetch: FetchResult,
                      report: BatchReport) -> None:
        reason = f"{fetch.counter}: {fetch.reason}" if fetch.reason else fetch.counter
        if not fetch.retryable:
            self._dead(message, reason, report)
            return
        retry_after = fetch.retry_after
        if fetch.status in (429, 503) or (fetch.outcome == "blocked" and retry_after):
            retry_after = retry_after if retry_after is not None else DEFAULT_RETRY_AFTER_SECONDS
            try:  # the whole source waits, not just this task (DESIGN.md section 9)
                self.store.pause_source(source.name, retry_after)
                self.store.pause_host(source.name, host_of(message.url), retry_after)
            except redis.RedisError as error:
                log.warning("pausing %s failed: %s", source.name, error)
        self._fail(message, reason, retry_after, report)

    def _fail(self, message: TaskMessage, reason: str, retry_after: float | None, report: BatchReport,
              counter: str | None = None) -> None:
        if counter:
            report.outcomes[counter] += 1
        try:
            dead = self.store.fail(message, reason, retry_after)
        except redis.RedisError:
            log.exception("could not hand task %s back; its lease will expire and the reaper retries it",
                          message.task_id)
            return
        if dead:
            report.dead += 1
            self._complete_failed(message)
        else:
            report.retried += 1

    def _dead(self, message: TaskMessage, reason: str, report: BatchReport) -> None:
        """A failure retrying cannot fix (404, not HTML, redirect loop, rejected record)."""
        try:
            self.store.reject(message.source, message.to_json(), reason)
        except redis.RedisError:
            log.exception("could not dead-letter task %s", message.task_id)
            return
        report.dead += 1
        self._complete_failed(message)

    def _complete_failed(self, message: TaskMessage) -> None:
        if message.run_id is None or message.package_id is None:
            return
        try:
            self.packages.complete_tasks(message.source, message.run_id, message.package_id, [message.task_id],
                                         failed=True)
        except Exception:
            log.exception("could not count dead task %s down in its package", message.task_id)

    def _complete(self, source: SourceConfig, messages: list[TaskMessage], report: BatchReport) -> None:
        """Release the leases of finished tasks, then count their packages down."""
        if not messages:
            return
        self.store.release(source.name, [message.task_id for message in messages])
        by_package: dict[tuple[str, int], list[str]] = defaultdict(list)
        for message in messages:
            if message.run_id is not None and message.package_id is not None:
                by_package[(message.run_id, message.package_id)].append(message.task_id)
        for (run_id, package_id), task_ids in by_package.items():
            self.packages.complete_tasks(source.name, run_id, package_id, task_ids)

    def _count(self, source: str, report: BatchReport) -> None:
        try:
            self.store.count_outcomes(source, report.outcomes)
        except redis.RedisError as error:
            log.warning("counting outcomes of %s failed: %s", source, error)


_runner: BatchRunner | None = None
_runner_pid: int | None = None
_runner_lock = threading.Lock()


def batch_runner() -> BatchRunner:
    """The runner of this process (a forked Celery child makes its own: clients do not survive fork)."""
    global _runner, _runner_pid
    with _runner_lock:
        if _runner is None or _runner_pid != os.getpid():
            _runner = BatchRunner()
            _runner_pid = os.getpid()
        return _runner
