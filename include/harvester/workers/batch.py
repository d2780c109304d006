"""One Celery message = one batch of admitted tasks of ONE source: the worker's pipeline.

The flow is the same whatever renders the pages (DESIGN.md section 1):

0. one atomic call starts the batch's tasks (their leases begin now) and returns those this delivery
   still holds; only those are fetched (a redelivered or duplicated message is dropped, never fetched unadmitted);
1. a :class:`~harvester.scraping.fetching.page_fetcher.PageFetcher` fetches every page of the batch (the HTTP
   :class:`~harvester.scraping.fetching.fetcher.Fetcher` concurrently, or the page slot's browser through
   :class:`~harvester.pageslots.browser_host.BrowserPageFetcher`) while a :class:`LeaseHeartbeat` vouches for
   the leases; each request waits at the :class:`FetchPermit` for a per_minute token;
2. :func:`~harvester.scraping.page.process_page` extracts a record (details) or links, and the records of
   its items when the source has ``listing.records`` (listings);
3. each page is sorted by its outcome: a failed fetch goes to the :class:`FailurePolicy` (retry,
   dead letter, pause), a rejected record to dead letters;
4. the :class:`Settler` writes every record (detail pages' and listing items') with one ``bulk_write`` per run;
5. the :class:`LinkFollower` adds discovered tasks to their package and pushes them to intake, before
   the listing page that found them completes, so a package never finishes with work still to come;
6. the :class:`Settler` counts the packages of finished tasks down, then releases their leases (a failed
   count-down hands the tasks back for a retry instead: a package is never stranded);
7. the batch's outcome counters go to Redis.

Every task ends stored, retried or dead-lettered with a reason; nothing a site does raises out of here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis

from harvester.config import SourceConfig
from harvester.distributor import RateLimitStore, RegisteredSources, TaskMessage, host_of
from harvester.errors import SourceNotRegistered, StorageError, redis_storage_errors
from harvester.metrics import record_fetches
from harvester.scraping import (
    HOST_UNREACHABLE,
    AddressGuard,
    Fetcher,
    FetchResult,
    PageFetcher,
    PageResult,
    RobotsCache,
    process_page,
)
from harvester.settings import HarvesterSettings, get_settings
from harvester.storage import DataHandler, RunFigures
from harvester.workers.archiving import PageArchive, RejectedEvidence
from harvester.workers.chains import ChainContinuation
from harvester.workers.clients import WorkerClients
from harvester.workers.failures import DEFAULT_RETRY_AFTER_SECONDS, FailurePolicy
from harvester.workers.follower import LinkFollower, discovered_task_id
from harvester.workers.heartbeat import LeaseHeartbeat, RateTokenPermit
from harvester.workers.host_breaker import BreakerVerdict, HostBreaker
from harvester.workers.host_rate import HostRateGate
from harvester.workers.host_throttle import HostThrottle
from harvester.workers.incremental import IncrementalFetching, refresh_not_modified
from harvester.workers.refill import RefillingRound, refills
from harvester.workers.report import BatchReport, count_listing_records
from harvester.workers.settler import Settler, StoredPage
from harvester.workers.sitemaps import SitemapFollower

if TYPE_CHECKING:
    from harvester.storage import PackageStore

__all__ = ["DEFAULT_RETRY_AFTER_SECONDS", "BatchReport", "BatchRunner", "LeaseHeartbeat", "batch_runner",
           "discovered_task_id", "new_event_loop"]

log = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (it is, with uvicorn): less CPU per request than the default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class BatchRunner:
    """The per-process state of a worker (clients, event loop, fetchers) and the pipeline wiring its parts."""

    def __init__(self, settings: HarvesterSettings, clients: WorkerClients | None = None) -> None:
        self.settings = settings
        self.clients = clients or WorkerClients.from_settings(self.settings)
        self.sources = RegisteredSources(self.clients.redis)  # the producer's registered copy, by version
        self.failures = FailurePolicy.from_settings(self.settings, self.clients)
        self.loop = new_event_loop()
        self.guard = AddressGuard.from_settings(self.settings)
        self.robots = RobotsCache.from_settings(self.settings, self.clients.redis)
        self.follower = LinkFollower.from_settings(self.settings, self.clients, self.address_refusals, self.robots)
        self.settler = Settler.from_settings(self.settings, self.clients, self.failures)
        self.chains = ChainContinuation.from_settings(self.settings, self.store, self.settler, self.clients.intake)
        self.throttle = HostThrottle.from_settings(self.settings, self.clients.redis)  # blocks slow their host
        self.breaker = HostBreaker.from_settings(self.settings, self.clients.redis)  # unreachable hosts pause
        from harvester.pageslots import CountryExits

        self.exits = CountryExits(self.guard, self.clients.redis)  # HTTP sources with a country: its proxy pool
        self.fetcher: PageFetcher = Fetcher.from_settings(
            self.settings, robots=self.robots, gate=HostRateGate.from_settings(self.settings, self.clients.redis),
            guard=self.guard, exits=self.exits)
        self._browser: PageFetcher | None = None
        self.evidence = RejectedEvidence(self.settings)  # rejected HTTP pages' bodies, as evidence
        self.archive = PageArchive(self.settings)  # sources with output.archive: every fetched response, as WARC
        # incremental harvests: conditional requests, sitemaps
        self.incremental = IncrementalFetching.from_settings(self.settings, self.clients.data, self.fetcher)
        self.sitemaps = SitemapFollower.from_settings(self.settings, self.clients, self.follower, self.failures)

    # -- the shared clients, under the names the tests and tools use --------------------------------
    @property
    def redis(self) -> redis.Redis:
        return self.clients.redis

    @property
    def store(self) -> RateLimitStore:
        return self.clients.store

    @property
    def data(self) -> DataHandler:
        return self.clients.data

    @property
    def packages(self) -> PackageStore:
        return self.clients.packages

    # -- fetchers ----------------------------------------------------------------------------------
    @property
    def browser(self) -> PageFetcher:
        """The process's page-slot browser host as a page fetcher (launched on the first browser task)."""
        if self._browser is None:
            from harvester.pageslots import BrowserPageFetcher

            self._browser = BrowserPageFetcher.from_settings(self.settings)
        return self._browser

    def address_refusals(self, urls: list[str]) -> dict[str, str]:
        """Discovered links whose host resolves to a refused address (resolved on the process's loop), at most
        ``link_screening_max_hosts`` hosts within ``link_screening_budget_seconds`` (the rest refused)."""
        return self.loop.run_until_complete(self.guard.refusals(
            urls, self.settings.link_screening_max_hosts, self.settings.link_screening_budget_seconds))

    def fetcher_for(self, source: SourceConfig) -> PageFetcher:
        return self.browser if source.render == "browser" else self.fetcher

    def batch_deadline(self, source: SourceConfig, pages: int = 1, fetcher: PageFetcher | None = None) -> float:
        """How long a batch may be vouched for: the fetcher's longest fetching, plus two leases' worth
        for extracting and storing. Past it the heartbeats stop and the reaper takes the tasks back."""
        fetching = (fetcher or self.fetcher).fetch_seconds(source, pages)
        return fetching + 2 * self.settings.lease_seconds

    def close(self) -> None:
        self.archive.close()
        for fetcher in (self._browser, self.fetcher):
            if fetcher is not None:
                with contextlib.suppress(Exception):  # a fetcher that fails to close must not keep the rest open
                    self.loop.run_until_complete(fetcher.aclose())
        with contextlib.suppress(Exception):  # the countries' exits (guard proxies) after the fetcher that used them
            self.loop.run_until_complete(self.exits.aclose())
        self.loop.close()
        self.clients.close()

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

    def start(self, name: str, messages: list[TaskMessage], report: BatchReport) -> list[TaskMessage]:
        """The batch's first act: start its tasks in one atomic call; the messages this delivery holds.

        A message without a token, or whose task was reaped and handed on, or that another delivery of
        the same message already started, is not ours: it is dropped (counted ``stale_delivery``)."""
        leases = {message.task_id: message.lease_token for message in messages if message.lease_token}
        held = set(self.store.start(name, leases).held) if leases else set()
        ours = [message for message in messages if message.task_id in held]
        if len(ours) < len(messages):
            report.outcomes["stale_delivery"] += len(messages) - len(ours)
            log.info("%s: %d of %d tasks of this message are no longer held (a redelivered or duplicated message, "
                     "or tasks a refilling batch took on): dropped, not fetched", name, len(messages) - len(ours),
                     len(messages))
        return ours

    def run_source(self, name: str, messages: list[TaskMessage]) -> BatchReport:
        """Start, fetch (HTTP or browser, one flow), extract and settle one source's batch; then, for a chain (an API
        whose next request is built from its response), send each next request in this batch, round after round,
        while the limits let :class:`ChainContinuation` hand it on and the chain's time budget lasts."""
        report = BatchReport(source=name, tasks=len(messages))
        messages = self.start(name, messages, report)
        if not messages:
            self.count(name, report)
            return report
        try:
            source = self.sources.get(name)
        except (SourceNotRegistered, StorageError) as error:  # retry later (a registration comes), never crash
            reason = f"source config {name!r} could not be loaded: {error}"
            with self.failures.deferred():
                for message in messages:
                    self.failures.retry(message, reason, None, report, counter="config_error")
            self.count(name, report)
            return report
        chain_until = self.chains.deadline(source)
        round_report = report
        while True:
            messages = self.run_round(source, messages, round_report, chain_until)
            if round_report is not report:
                report.merge(round_report)
            if not messages:
                return report
            round_report = BatchReport(source=name, tasks=len(messages))

    def run_round(self, source: SourceConfig, messages: list[TaskMessage], report: BatchReport,
                  chain_until: float | None = None) -> list[TaskMessage]:
        """Fetch, extract and settle tasks this batch holds (started); the next requests of chains it now holds.
        An HTTP batch settles its pages as they end and takes on more work meanwhile (:mod:`.refill`)."""
        if refills(self, source, messages):
            return RefillingRound(self, source, report, chain_until).run(messages)
        name = source.name
        pages = self.fetcher_for(source)
        chained: list[TaskMessage] = []
        # every MongoDB read runs under the heartbeat: one that waits out an outage must not cost the leases
        with LeaseHeartbeat(self.store, name, leases_of(messages), self.settings.heartbeat_seconds,
                            self.batch_deadline(source, len(messages), pages)) as heartbeat:
            fetcher = self.incremental.fetcher(source, messages, pages, self.sources.version(name))
            permit = RateTokenPermit(self.store, name, [message.task_id for message in messages], heartbeat)
            fetched = self.loop.run_until_complete(
                fetcher.fetch_all([message.url for message in messages], source, permit))
            report.outcomes.update(fetched.outcomes)
            if permit.waited_seconds >= 0.001:
                report.outcomes["rate_wait_ms"] += int(permit.waited_seconds * 1000)
            if not self.archived(source, messages, fetched.results, report):
                self.count(name, report, messages, fetched.results)
                return []
            chained = self.settle(source, messages, self.process(source, messages, fetched.results), report,
                                  chain_until)
        self.count(name, report, messages, fetched.results)
        return chained

    def finish(self, source: SourceConfig, messages: list[TaskMessage], fetches: list[FetchResult],
               outcomes: Mapping[str, int] | None = None) -> BatchReport:
        """Extract, store, release and count down pages fetched elsewhere: the same ending as
        :meth:`run_source`; ``outcomes`` adds counters of the fetching (blocked requests, bytes)."""
        report = BatchReport(source=source.name, tasks=len(messages))
        report.outcomes.update(outcomes or {})
        with LeaseHeartbeat(self.store, source.name, leases_of(messages), self.settings.heartbeat_seconds,
                            self.batch_deadline(source)):
            if self.archived(source, messages, fetches, report):
                self.settle(source, messages, self.process(source, messages, fetches), report)
        self.count(source.name, report, messages, fetches)
        return report

    def archived(self, source: SourceConfig, messages: list[TaskMessage], fetches: list[FetchResult],
                 report: BatchReport) -> bool:
        """Archive the batch's responses (``output.archive``) before anything is stored; False when the archive
        is required and failed: then every task of the batch was handed back for a later attempt."""
        reason = self.archive.keep(source, messages, fetches, report)
        if reason is None:
            return True
        with self.failures.deferred():
            for message, fetch in zip(messages, fetches, strict=True):
                if fetch.outcome != "skipped":  # a task whose lease was lost is not ours to hand back
                    self.failures.retry(message, reason, None, report)
        return False

    def process(self, source: SourceConfig, messages: list[TaskMessage],
                fetches: list[FetchResult]) -> list[PageResult]:
        return [process_page(source, message.kind, message.url, message.depth, fetch, settings=self.settings,
                             request=message.request)
                for message, fetch in zip(messages, fetches, strict=True)]

    def settle(self, source: SourceConfig, messages: list[TaskMessage], pages: list[PageResult],
               report: BatchReport, chain_until: float | None = None) -> list[TaskMessage]:
        """Sort pages by outcome, write the records, follow the links, then complete what finished; the tasks
        handed back or dead-lettered on the way are recorded together at the end (FailurePolicy.deferred).
        Until ``chain_until`` (monotonic; None: never) a chain's next request is kept for this batch: returned."""
        with self.failures.deferred():
            breakers = self.host_breakers(source, messages, pages, report)
            return self._settle(source, messages, pages, report, breakers, chain_until)

    def _settle(self, source: SourceConfig, messages: list[TaskMessage], pages: list[PageResult],
                report: BatchReport, breakers: dict[str, BreakerVerdict],
                chain_until: float | None = None) -> list[TaskMessage]:
        to_store: list[StoredPage] = []
        record_listings: list[StoredPage] = []  # listing pages with records of their items (listing.records)
        listings, sitemaps, not_modified = [], [], []
        gone: list[StoredPage] = []  # detail pages whose item is gone (404/410, a soft 404, a redirect away)
        rejected: list[tuple[TaskMessage, FetchResult, str]] = []  # pages whose record was rejected, and why
        for message, page in zip(messages, pages, strict=True):
            fetch = page.fetch
            if fetch.outcome == "skipped":  # the lease went to another worker: it is not ours to settle
                report.outcomes["lease_lost"] += 1
                continue
            report.outcomes[fetch.counter] += 1
            if fetch.truncated:
                report.outcomes["truncated"] += 1
            if page.gone is not None:
                gone.append((message, page))
            elif fetch.outcome == "not_modified":
                not_modified.append((message, page))
            elif not fetch.ok:
                self.fetch_failed(source, message, fetch, breakers.get(host_of(message.url)), report)
            elif message.kind == "sitemap":
                sitemaps.append((message, page))
            elif page.extraction is not None:
                for problem in page.extraction.problems:
                    report.outcomes[problem.counter] += 1
                report.outcomes.update(report.extracted.add(message.run_id, page.extraction))
                if page.extraction.record is None:
                    report.outcomes["rejected"] += 1
                    why = f" ({fetch.reason})" if fetch.reason else ""  # a browser page not ready: what it waited for
                    reason = f"record rejected: {page.rejected_reason}{why}"
                    rejected.append((message, fetch, reason))
                    self.failures.dead_letter(message, reason, report)
                else:
                    to_store.append((message, page))
            elif page.listing_records is not None and count_listing_records(page, report, message.run_id):
                record_listings.append((message, page))  # stored first, then its links followed
            else:
                listings.append((message, page))
        self.evidence.keep(source, rejected, report)  # their dead letters are written when settling ends
        self.answer_blocks(source, messages, pages, report)

        finished, stored = self.settler.settle_items(source, to_store + record_listings, gone, report,
                                                     self.sources.version(source.name))
        stored_ids = {id(message) for message in stored}
        listings += [(message, page) for message, page in record_listings if id(message) in stored_ids]
        listing_ids = {id(message) for message, _ in record_listings}
        stored = [message for message in stored if id(message) not in listing_ids]  # completed once followed
        chain: list[tuple[TaskMessage, TaskMessage]] | None = [] if chain_until is not None else None
        followed = self.follow_listings(source, listings, report, chain)
        followed += self.sitemaps.follow_all(source, sitemaps, report)
        finished += refresh_not_modified(self.data, self.clients.urls, self.failures, source, not_modified, report)
        chain = [(parent, child) for parent, child in chain or [] if any(parent is done for done in followed)]
        parents = {id(parent) for parent, _ in chain}
        self.settler.complete(source, [message for message in finished + stored + followed
                                       if id(message) not in parents], report)
        return self.chains.continue_all(source, chain, report, chain_until)

    def follow_listings(self, source: SourceConfig, listings: list[StoredPage], report: BatchReport,
                        chain: list[tuple[TaskMessage, TaskMessage]] | None) -> list[TaskMessage]:
        """Follow each listing page's links (``chain``: see :meth:`LinkFollower.follow`); the pages followed. One
        whose following failed (Redis or MongoDB down) goes back for a retry, which finds the same links."""
        followed: list[TaskMessage] = []
        for message, page in listings:
            try:
                self.follower.follow(source, message, page, report, chain)
                followed.append(message)
            except Exception as error:  # Redis, MongoDB or worse: the page is retried, never lost
                log.exception("following the links of %s failed", message.url)
                self.failures.retry(message, f"link discovery failed: {type(error).__name__}: {error}", None,
                                    report)
        return followed

    def fetch_failed(self, source: SourceConfig, message: TaskMessage, fetch: FetchResult,
                     breaker: BreakerVerdict | None, report: BatchReport) -> None:
        """A failed page: deferred past its host's pause without spending a retry when the host could not be
        reached and its breaker is open, else retried or dead-lettered by the failure policy."""
        if fetch.outcome == HOST_UNREACHABLE and breaker is not None and self.breaker.defers(breaker):
            self.failures.defer(message, f"{fetch.counter}: {fetch.reason} (host paused {breaker.open_seconds:g}s)",
                                breaker.open_seconds, report)
        else:
            self.failures.fetch_failed(source, message, fetch, report)

    def host_breakers(self, source: SourceConfig, messages: list[TaskMessage], pages: list[PageResult],
                      report: BatchReport) -> dict[str, BreakerVerdict]:
        """Each host's breaker after this batch (:mod:`harvester.workers.host_breaker`): its ``host_unreachable``
        pages count against it, a page that got any response closes it. An opened breaker is counted
        (``host_breaker_opened``); its host's failed tasks are then deferred by the caller."""
        by_host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for message, page in zip(messages, pages, strict=True):
            if page.fetch.outcome == HOST_UNREACHABLE:
                by_host[host_of(message.url)][0] += 1
            elif page.fetch.status is not None:
                by_host[host_of(message.url)][1] += 1
        verdicts = self.breaker.record_all(source.name, {host: (failed, reached) for host, (failed, reached)
                                                         in by_host.items()})
        opened = sum(verdict.state == "opened" for verdict in verdicts.values())
        if opened:
            report.outcomes["host_breaker_opened"] += opened
            log.info("%s: %d unreachable hosts paused by their breaker", source.name, opened)
        return verdicts

    def answer_blocks(self, source: SourceConfig, messages: list[TaskMessage], pages: list[PageResult],
                      report: BatchReport) -> None:
        """What block pages do beyond their retry: each host's rate adapts to its blocked and clean pages (shared
        by every worker, :mod:`harvester.workers.host_throttle`), a host that blocked repeatedly is paused, and the
        source's cookies for a host that blocked are dropped (HTTP: a challenge often binds its verdict to a
        cookie; the browser's fresh context does the same for browser sources). A page that went out in a session
        (an exit of the country's proxy pool) retires it and bans its exit from the host: its retry takes another
        exit with fresh cookies, and the host is paused only once no exit of the pool is left to it."""
        by_host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        sessions: dict[str, tuple[str, str]] = {}  # blocked sessions: their host and why
        for message, page in zip(messages, pages, strict=True):
            if page.fetch.outcome == "blocked":
                by_host[host_of(message.url)][0] += 1
                if page.fetch.session:
                    sessions[page.fetch.session] = (host_of(message.url), page.fetch.reason or "a block page")
                if message.run_id:
                    report.blocked_by_run[message.run_id] += 1
            elif page.fetch.ok:
                by_host[host_of(message.url)][1] += 1
        rotated, moved = set[str](), set[str]()  # hosts another exit welcomes; hosts moved up a proxy tier
        if sessions and isinstance(self.fetcher, Fetcher):
            report.outcomes["sessions_retired_for_blocks"] += len(sessions)
            rotated = self.loop.run_until_complete(self.fetcher.sessions.rotated_hosts(sessions))
            moved = self.fetcher.sessions.moved_hosts(sessions)  # a new tier's addresses: no need to slow down
        verdicts = self.throttle.record_all(source, {host: (0 if host in moved else blocked, clean)
                                                     for host, (blocked, clean) in by_host.items()})
        paused = [verdict.host for verdict in verdicts if verdict.pause and verdict.host not in rotated]
        if paused:
            report.outcomes["hosts_paused_for_blocks"] += len(paused)
            self.failures.pause_hosts(source, paused, self.throttle.pause_seconds)
        for host, (blocked, _) in by_host.items():
            if blocked and source.render == "http" and isinstance(self.fetcher, Fetcher):
                report.outcomes["cookies_dropped_for_blocks"] += self.fetcher.cookies.drop_host(source.name, host)

    def count(self, source: str, report: BatchReport, messages: list[TaskMessage] | None = None,
              fetches: list[FetchResult] | None = None) -> None:
        """The batch's outcome counters and its request metrics, in one round trip; a counter that cannot be
        written never fails the batch (its work is done and settled)."""
        try:
            with redis_storage_errors():  # the round trip is sent here, not by a store
                pipeline = self.redis.pipeline(transaction=False)
                self.store.count_outcomes(source, report.outcomes, pipeline)
                for run_id, figures in report.extracted.by_run.items():  # the run's quality and drift figures
                    RunFigures(self.redis).queue_add(pipeline, source, run_id, figures)
                for run_id, blocked in report.blocked_by_run.items():  # block pages, each attempt counted
                    RunFigures(self.redis).queue_add(pipeline, source, run_id, {"pages_blocked": blocked})
                if messages and fetches:
                    record_fetches(self.redis, source, messages, fetches, pipeline=pipeline)
                pipeline.execute()
        except StorageError as error:
            log.warning("counting outcomes and request metrics of %s failed: %s", source, error)


def leases_of(messages: list[TaskMessage]) -> dict[str, str]:
    """Task id -> fencing token of the messages a batch holds."""
    return {message.task_id: str(message.lease_token) for message in messages}


_runner: BatchRunner | None = None
_runner_pid: int | None = None
_runner_lock = threading.Lock()


def batch_runner() -> BatchRunner:
    """The runner of this process (a forked Celery child makes its own: clients do not survive fork)."""
    global _runner, _runner_pid
    with _runner_lock:
        if _runner is None or _runner_pid != os.getpid():
            _runner = BatchRunner(get_settings())  # a worker process: its settings, read once
            _runner_pid = os.getpid()
        return _runner


def freeze_startup_objects() -> int:
    """Move every object alive now (the imported scraping stack, the clients, the settings: a worker process's
    start) out of the garbage collector's sight, once the process is ready; the number moved.

    Why: a full collection walks every tracked object, and a process holds over 150,000 once the batch runner is
    built (pydantic's models, aiohttp, lxml, pymongo, the settings and sources), about 65 ms a walk on a 2-core
    machine, in whatever thread allocates at the time (often the event loop, with requests in flight). Objects made
    at start-up live as long as the process, so walking them finds nothing: frozen, a full collection took about
    2 ms (measured over 600-page crawls, 2026-12-06). Python's documentation recommends the same before a fork
    (``gc.freeze``); a Celery child also keeps more of its parent's pages shared, as the walks no longer write to
    the frozen objects' headers."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
