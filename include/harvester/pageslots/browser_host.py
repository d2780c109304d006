"""An in-process browser host: the browser side of the pipeline's PageFetcher contract.

Browser tasks admitted by the distributor are served by page slots (:mod:`harvester.pageslots.host`,
one process per slot, one country, through its proxy). This module is the pipeline's in-process
:class:`BrowserPageFetcher` for a browser batch that reaches ``scrape_batch`` anyway (a message of an
older release) and for tools and tests that render directly.

A :class:`BrowserHost` keeps one slot browser per country (:class:`harvester.scraping.SlotBrowser`, the same
one a page slot has: its guard, a context per source visit, through the country's proxy when one is
configured, ``AIRFLOW_CONN_PROXY_<C>``) open across Celery tasks, and renders by the slot browser's one
failure rule (re-open, relaunch every 4th failure, give up at the 7th); a blocked task closes the page; a host
idle for ``page_slot_idle_seconds`` closes its browsers (:meth:`BrowserHost.close_if_idle`).

Playwright objects belong to the event loop that made them, and a Celery solo worker blocks its
main thread between tasks, so :class:`BrowserHostThread` runs the host on an event loop of its own
in a daemon thread: tasks call it synchronously, and idle closing runs while no task does.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from harvester.config import SourceConfig
from harvester.pageslots.proxies import proxy_for
from harvester.pageslots.registry import SlotState
from harvester.scraping import SKIPPED_REASON, FetchedBatch, FetchPermit, FetchResult, Render, SlotBrowser, first_line
from harvester.settings import HarvesterSettings

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class HostTotals:
    """Running totals of one host, for the batch's outcome counters and for tests."""

    pages: int = 0  # page loads that produced a response (any HTTP status)
    failed_loads: int = 0  # loads that produced nothing, or a page never ready
    gave_up: int = 0  # tasks given up after the give-up threshold
    browser_launches: int = 0
    relaunches: int = 0  # browsers closed by the relaunch threshold
    idle_closes: int = 0
    blocked_closes: int = 0  # pages closed because the site blocked the task
    blocked_requests: Counter[str] = field(default_factory=Counter)  # by resource type
    transferred_bytes: int = 0  # through the guard proxy (what went through the country's proxy)
    outcomes: Counter[str] = field(default_factory=Counter)  # every render's browser_* counters

    def snapshot(self) -> HostTotals:
        return replace(self, blocked_requests=Counter(self.blocked_requests), outcomes=Counter(self.outcomes))

    def outcomes_since(self, before: HostTotals) -> Counter[str]:
        """The per-source outcome counters a batch adds (``outcome:browser_*`` in Redis)."""
        return self.outcomes - before.outcomes

    def add(self, render: Render) -> None:
        outcomes = render.outcomes
        self.outcomes.update(outcomes)
        self.failed_loads += outcomes.get("browser_failed_loads", 0)
        self.relaunches += outcomes.get("browser_relaunches", 0)
        self.gave_up += outcomes.get("browser_gave_up", 0)
        self.transferred_bytes += render.transferred_bytes
        self.blocked_requests.update({name.split(":", 1)[1]: amount for name, amount in outcomes.items()
                                      if name.startswith("browser_blocked:")})


class BrowserHost:
    """One slot browser per country of this process. ``async with BrowserHost(settings) as host``."""

    def __init__(self, settings: HarvesterSettings) -> None:
        self.settings = settings
        self.totals = HostTotals()
        self.browsers: dict[str, SlotBrowser] = {}
        self._lock = asyncio.Lock()
        self._last_used = time.monotonic()

    async def __aenter__(self) -> BrowserHost:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- state ---------------------------------------------------------------------------------
    @property
    def browser_open(self) -> bool:
        return any(browser.browser is not None and browser.browser.is_connected() for browser in self.browsers.values())

    def idle_seconds(self) -> float:
        return time.monotonic() - self._last_used

    def states(self) -> dict[str, str]:
        return {country: (SlotState.PAGE_READY if browser.open else SlotState.NO_PAGE).value
                for country, browser in self.browsers.items()}

    def _browser(self, country: str) -> SlotBrowser:
        if country not in self.browsers:
            self.browsers[country] = SlotBrowser(f"in-process-{country or 'direct'}-{os.getpid()}",
                                                 proxy_for(country) if country else None, self.settings)
            self.browsers[country].country = country or None
        return self.browsers[country]

    # -- rendering -----------------------------------------------------------------------------
    async def render_all(self, urls: Iterable[str], source: SourceConfig) -> list[FetchResult]:
        """One page after the other in the source's country slot (a slot runs one task at a time)."""
        return [await self.render(url, source) for url in urls]

    async def render(self, url: str, source: SourceConfig, kind: str = "details") -> FetchResult:
        """Load ``url`` in the browser of ``source.country`` by the failure rule. Never raises for what a site
        or the browser does wrong: that becomes the result's outcome."""
        async with self._lock:
            browser = self._browser(source.country or "")
            launches = browser.launches
            try:
                render = await browser.render(url, source, kind)
            except Exception as error:  # a Playwright or driver fault we did not foresee: fail the task
                log.exception("rendering %s failed unexpectedly", url)
                with contextlib.suppress(Exception):  # the browser is restarted for the next task either way
                    await browser.close_browser()
                return FetchResult(url, "connection_error",
                                   reason=f"browser failure: {type(error).__name__}: {first_line(error)}")
            finally:
                self._last_used = time.monotonic()
            self.totals.browser_launches += browser.launches - launches
            self.totals.add(render)
            if render.ending != "gave_up":
                self.totals.pages += 1
            if render.ending == "blocked":
                self.totals.blocked_closes += 1
                render.outcomes["browser_blocked_closes"] += 1
                self.totals.outcomes["browser_blocked_closes"] += 1
                await browser.close_page()
            return render.fetch

    # -- closing -------------------------------------------------------------------------------
    async def close_if_idle(self) -> bool:
        """Close the browsers after ``page_slot_idle_seconds`` without a task; True when it did."""
        if self._lock.locked() or not self.browser_open:
            return False
        if self.idle_seconds() < self.settings.page_slot_idle_seconds:
            return False
        async with self._lock:
            for browser in self.browsers.values():
                await browser.close_browser()
            self.totals.idle_closes += 1
        log.info("page slots idle for %.0fs: browser closed", self.settings.page_slot_idle_seconds)
        return True

    async def close(self) -> None:
        """Close every browser, its guard and its Playwright driver."""
        async with self._lock:
            for browser in self.browsers.values():
                await browser.close()


class BrowserHostThread:
    """A :class:`BrowserHost` on an event loop of its own thread, driven synchronously by Celery tasks."""

    def __init__(self, settings: HarvesterSettings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="browser-host", daemon=True)
        self._thread.start()
        self.host: BrowserHost = self.call(self._make_host())  # its asyncio.Lock belongs to this loop
        self._idle_watch = asyncio.run_coroutine_threadsafe(self._close_when_idle(), self.loop)
        self._closed = False

    async def _make_host(self) -> BrowserHost:
        return BrowserHost(self.settings)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _close_when_idle(self) -> None:
        interval = max(0.2, min(5.0, self.settings.page_slot_idle_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.host.close_if_idle()
            except Exception:  # the watch keeps running: a failed close is retried at the next interval
                log.exception("closing the idle browser failed")

    @property
    def closed(self) -> bool:
        return self._closed

    def render_all(self, urls: list[str], source: SourceConfig) -> list[FetchResult]:
        return self.call(self.host.render_all(urls, source))

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._idle_watch.cancel()
        with contextlib.suppress(Exception):  # shutting down: the loop stops and the browser tree is killed anyway
            self.call(self.host.close(), timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)


def render_seconds(settings: HarvesterSettings, source: SourceConfig, pages: int = 1) -> float:
    """The longest ``pages`` pages of ``source`` take in a slot browser: one after the other, each tried up to
    the slot's give-up threshold (its timeout, its readiness wait and the retry delay each time)."""
    per_attempt = source.timeout + source.browser.wait_timeout + settings.page_slot_retry_delay_seconds
    return pages * settings.page_slot_give_up_after_failures * per_attempt


class BrowserPageFetcher:
    """The page-fetcher contract (:class:`harvester.scraping.fetching.page_fetcher.PageFetcher`) met by the
    process's :class:`BrowserHostThread` (started on the first fetch): the worker awaits a render on its
    own loop while the host's loop runs it, and the host's totals since the batch began become the
    batch's ``browser_*`` counters. Each page's navigation takes the permit's token; its sub-requests
    are counted (``browser_sub_requests``) but charged only by page slots."""

    def __init__(self, settings: HarvesterSettings, thread: BrowserHostThread | None = None) -> None:
        self.settings = settings
        self._thread = thread

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> BrowserPageFetcher:
        return cls(settings)

    @property
    def thread(self) -> BrowserHostThread:
        if self._thread is None:
            self._thread = browser_host(self.settings)
        return self._thread

    def fetch_seconds(self, source: SourceConfig, pages: int) -> float:
        return render_seconds(self.settings, source, pages)

    async def fetch_all(self, urls: Sequence[str], source: SourceConfig, permit: FetchPermit | None = None
                        ) -> FetchedBatch:
        thread = self.thread
        before = thread.host.totals.snapshot()
        if permit is None:
            rendering = asyncio.run_coroutine_threadsafe(thread.host.render_all(list(urls), source), thread.loop)
            results = await asyncio.wrap_future(rendering)
            return FetchedBatch(results, thread.host.totals.outcomes_since(before))
        results = []
        for index, url in enumerate(urls):  # pages render one after the other: the permit is asked for each
            if not await permit(index):
                results.append(FetchResult(url, "skipped", reason=SKIPPED_REASON))
                continue
            rendering = asyncio.run_coroutine_threadsafe(thread.host.render_all([url], source), thread.loop)
            results.extend(await asyncio.wrap_future(rendering))
        return FetchedBatch(results, thread.host.totals.outcomes_since(before))

    async def aclose(self) -> None:
        if self._thread is not None:
            self._thread.close()


_host: BrowserHostThread | None = None
_host_pid: int | None = None
_host_lock = threading.Lock()


def browser_host(settings: HarvesterSettings) -> BrowserHostThread:
    """The browser host of this process, started on first use and closed at exit."""
    global _host, _host_pid
    with _host_lock:
        if _host is None or _host_pid != os.getpid() or _host.closed:
            _host = BrowserHostThread(settings)
            _host_pid = os.getpid()
            atexit.register(_host.close, 10.0)
        return _host
