"""An in-process browser host: the browser side of the pipeline's PageFetcher contract.

Browser tasks admitted by the distributor are served by page slots (:mod:`harvester.pageslots.host`,
one process per slot, one country, through its proxy). This module is the pipeline's in-process
:class:`BrowserPageFetcher` for a browser batch that reaches ``scrape_batch`` anyway (a message of an
older release) and for tools and tests that render directly; each country's context browses through
its proxy when one is configured (``AIRFLOW_CONN_PROXY_<C>``).

A :class:`BrowserHost` owns one Playwright driver and one Chromium, and one page per country (a
page slot: its own browser context, so cookies of one country never leak into another). It keeps
the browser open across Celery tasks, blocks non-essential requests and counts them, and applies
the slot's failure rules:

- a page that fails to load is closed, re-opened and the load tried again;
- after ``page_slot_relaunch_after_failures`` (4) consecutive failures the browser is closed and
  launched again;
- after ``page_slot_give_up_after_failures`` (7) the slot gives the task up (the caller fails it
  through ``RateLimitStore.fail``) and goes back to NO_PAGE with its browser closed;
- a blocked task (HTTP 403/451) closes the page;
- a host idle for ``page_slot_idle_seconds`` closes its browser (:meth:`BrowserHost.close_if_idle`).

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
from typing import TYPE_CHECKING, Any, TypeVar

from harvester.config import SourceConfig
from harvester.pageslots.proxies import proxy_for
from harvester.pageslots.registry import SlotState
from harvester.scraping import (
    SKIPPED_REASON,
    AddressGuard,
    FetchedBatch,
    FetchPermit,
    FetchResult,
    PageLoad,
    ResourceBlocker,
    first_line,
    launch_chromium,
    load_page,
    user_agent_and_headers,
)
from harvester.settings import HarvesterSettings, get_settings

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class HostTotals:
    """Running totals of one host, for the batch's outcome counters and for tests."""

    pages: int = 0  # page loads that produced a response (any HTTP status)
    failed_loads: int = 0  # loads that produced nothing (timeout, refused, crashed tab)
    gave_up: int = 0  # tasks given up after the give-up threshold
    browser_launches: int = 0
    relaunches: int = 0  # browsers closed by the relaunch threshold
    idle_closes: int = 0
    blocked_closes: int = 0  # pages closed because the site blocked the task
    blocked_requests: Counter[str] = field(default_factory=Counter)  # by resource type
    transferred_bytes: int = 0  # response headers + bodies of the requests pages did make

    def snapshot(self) -> HostTotals:
        return replace(self, blocked_requests=Counter(self.blocked_requests))

    def outcomes_since(self, before: HostTotals) -> Counter[str]:
        """The per-source outcome counters a batch adds (``outcome:browser_*`` in Redis)."""
        outcomes: Counter[str] = Counter()
        blocked = self.blocked_requests - before.blocked_requests
        if blocked:
            outcomes["browser_blocked_requests"] = sum(blocked.values())
            for resource_type, amount in blocked.items():
                outcomes[f"browser_blocked:{resource_type}"] = amount
        for name in ("transferred_bytes", "failed_loads", "relaunches", "gave_up", "blocked_closes"):
            amount = getattr(self, name) - getattr(before, name)
            if amount:
                outcomes[f"browser_{name}"] = amount
        return outcomes


@dataclass
class PageSlot:
    """One country's page: its context, its page, its state and its run of failed loads."""

    country: str
    user_agent: str = ""
    context: BrowserContext | None = None
    page: Page | None = None
    blocker: ResourceBlocker = field(default_factory=ResourceBlocker)
    state: SlotState = SlotState.NO_PAGE
    consecutive_failures: int = 0


class BrowserHost:
    """One Chromium for every page slot of this process. ``async with BrowserHost(settings) as host``."""

    def __init__(self, settings: HarvesterSettings | None = None) -> None:
        self.settings = settings or get_settings()
        self.totals = HostTotals()
        self.slots: dict[str, PageSlot] = {}
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._lock = asyncio.Lock()
        self._last_used = time.monotonic()

    async def __aenter__(self) -> BrowserHost:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- state ---------------------------------------------------------------------------------
    @property
    def browser_open(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    def idle_seconds(self) -> float:
        return time.monotonic() - self._last_used

    def states(self) -> dict[str, str]:
        return {country: slot.state.value for country, slot in self.slots.items()}

    # -- rendering -----------------------------------------------------------------------------
    async def render_all(self, urls: Iterable[str], source: SourceConfig) -> list[FetchResult]:
        """One page after the other in the source's country slot (a slot runs one task at a time)."""
        return [await self.render(url, source) for url in urls]

    async def render(self, url: str, source: SourceConfig) -> FetchResult:
        """Load ``url`` in the slot of ``source.country``, applying the slot's failure rules.

        Never raises for what a site or the browser does wrong: that becomes the result's outcome.
        """
        async with self._lock:
            try:
                return await self._render(url, source)
            except Exception as error:  # a Playwright or driver fault we did not foresee: fail the task
                log.exception("rendering %s failed unexpectedly", url)
                with contextlib.suppress(Exception):
                    await self._close_browser()
                return FetchResult(url, "connection_error",
                                   reason=f"browser failure: {type(error).__name__}: {first_line(error)}")
            finally:
                self._last_used = time.monotonic()

    async def _render(self, url: str, source: SourceConfig) -> FetchResult:
        settings = self.settings
        slot = self.slots.setdefault(source.country or "", PageSlot(source.country or ""))
        started, started_at = time.monotonic(), time.time()  # retries count from the first attempt
        while True:
            loaded = await self._load_in_slot(slot, url, source)
            loaded.fetch.started_at = started_at
            self.totals.blocked_requests.update(loaded.blocked)
            self.totals.transferred_bytes += loaded.transferred_bytes
            if not loaded.load_failed:
                self.totals.pages += 1
                slot.consecutive_failures = 0
                slot.state = SlotState.PAGE_READY
                if loaded.fetch.outcome == "blocked":
                    self.totals.blocked_closes += 1
                    await self._close_page(slot)
                loaded.fetch.elapsed = time.monotonic() - started
                return loaded.fetch
            self.totals.failed_loads += 1
            slot.consecutive_failures += 1
            failures = slot.consecutive_failures
            log.warning("slot %s: page load %d of %s failed: %s", slot.country, failures, url, loaded.fetch.reason)
            if failures >= settings.page_slot_give_up_after_failures:
                self.totals.gave_up += 1
                slot.consecutive_failures = 0
                await self._close_browser()  # the slot goes back to NO_PAGE
                fetch = loaded.fetch
                fetch.reason = f"{fetch.reason} (page slot gave up after {failures} consecutive failed loads)"
                fetch.elapsed = time.monotonic() - started
                return fetch
            if failures % settings.page_slot_relaunch_after_failures == 0:
                self.totals.relaunches += 1
                await self._close_browser()  # launched again by the next attempt
            else:
                await self._close_page(slot)  # re-opened by the next attempt
            await asyncio.sleep(settings.page_slot_retry_delay_seconds)

    async def _load_in_slot(self, slot: PageSlot, url: str, source: SourceConfig) -> PageLoad:
        try:
            page = await self._open_page(slot, source)
        except Exception as error:  # Chromium missing or crashing at start: a failed load like any other
            await self._close_page(slot)
            reason = f"browser could not open a page: {type(error).__name__}: {first_line(error)}"
            return PageLoad(FetchResult(url, "connection_error", reason=reason), load_failed=True)
        slot.state = SlotState.RUNNING_SCRAPING_TASK
        return await load_page(page, slot.blocker, url, source, self.settings)

    async def _open_page(self, slot: PageSlot, source: SourceConfig) -> Page:
        user_agent, _ = user_agent_and_headers(source, self.settings)
        if slot.page is not None and not slot.page.is_closed() and slot.user_agent == user_agent:
            return slot.page
        await self._close_page(slot)
        slot.state = SlotState.PREPARING_PAGE
        browser = await self._ensure_browser()
        proxy = proxy_for(slot.country) if slot.country else None
        slot.context = await browser.new_context(user_agent=user_agent,
                                                 **({"proxy": proxy.playwright()} if proxy else {}))
        slot.user_agent = user_agent
        slot.page = await slot.context.new_page()
        slot.blocker = ResourceBlocker(AddressGuard.from_settings(self.settings))
        await slot.blocker.attach(slot.page)
        slot.state = SlotState.PAGE_READY
        return slot.page

    async def _ensure_browser(self) -> Browser:
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        if self._playwright is None:
            from playwright.async_api import async_playwright

            self._playwright = await async_playwright().start()
        self._browser = await launch_chromium(self._playwright, self.settings)
        self.totals.browser_launches += 1
        log.info("browser launched (%s)", self.settings.chromium_executable)
        return self._browser

    # -- closing -------------------------------------------------------------------------------
    async def _close_page(self, slot: PageSlot) -> None:
        if slot.context is None and slot.page is None:
            slot.state = SlotState.NO_PAGE
            return
        slot.state = SlotState.CLOSING_PAGE
        context, slot.context, slot.page = slot.context, None, None
        if context is not None:
            with contextlib.suppress(Exception):  # a crashed browser has nothing left to close
                await context.close()
        slot.state = SlotState.NO_PAGE

    async def _close_browser(self) -> None:
        for slot in self.slots.values():
            await self._close_page(slot)
        browser, self._browser = self._browser, None
        if browser is not None:
            with contextlib.suppress(Exception):
                await browser.close()
            log.info("browser closed")

    async def close_if_idle(self) -> bool:
        """Close the browser after ``page_slot_idle_seconds`` without a task; True when it did."""
        if self._lock.locked() or self._browser is None:
            return False
        if self.idle_seconds() < self.settings.page_slot_idle_seconds:
            return False
        async with self._lock:
            await self._close_browser()
            self.totals.idle_closes += 1
        log.info("page slots idle for %.0fs: browser closed", self.settings.page_slot_idle_seconds)
        return True

    async def close(self) -> None:
        """Close the browser and stop the Playwright driver."""
        async with self._lock:
            await self._close_browser()
            playwright, self._playwright = self._playwright, None
            if playwright is not None:
                with contextlib.suppress(Exception):
                    await playwright.stop()


class BrowserHostThread:
    """A :class:`BrowserHost` on an event loop of its own thread, driven synchronously by Celery tasks."""

    def __init__(self, settings: HarvesterSettings | None = None) -> None:
        self.settings = settings or get_settings()
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
            except Exception:
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
        with contextlib.suppress(Exception):
            self.call(self.host.close(), timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)


class BrowserPageFetcher:
    """The page-fetcher contract (:class:`harvester.scraping.page_fetcher.PageFetcher`) met by the
    process's :class:`BrowserHostThread` (started on the first fetch): the worker awaits a render on its
    own loop while the host's loop runs it, and the host's totals since the batch began become the
    batch's ``browser_*`` counters."""

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
        """Pages render one after the other, each may be tried up to the slot's give-up threshold."""
        per_attempt = source.timeout + self.settings.page_slot_retry_delay_seconds
        return pages * self.settings.page_slot_give_up_after_failures * per_attempt

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


def browser_host(settings: HarvesterSettings | None = None) -> BrowserHostThread:
    """The browser host of this process, started on first use and closed at exit."""
    global _host, _host_pid
    with _host_lock:
        if _host is None or _host_pid != os.getpid() or _host.closed:
            _host = BrowserHostThread(settings)
            _host_pid = os.getpid()
            atexit.register(_host.close, 10.0)
        return _host
