"""The one slot browser (DESIGN.md sections 5 and 12): one Chromium behind its guard proxy, one context per source
visit, one page, and the one failed-load rule. It serves the page slots (``harvester.pageslots.host``), the
in-process fetcher (``harvester.pageslots.browser_host``) and `harvester try` (:func:`render_page`).

- Chromium's only way out is its :class:`GuardProxy` (which relays through the country's proxy when there is
  one): every name is resolved and checked there once and the connection pinned to the checked address.
- A *visit* is a source's tasks in a row in this browser: each visit (or each task, ``browser.isolation: task``)
  gets a fresh context (cookies, storage, cache, service workers blocked, downloads refused), never shared with
  another source; the source's HTTP connection sets its cookies on that context only, and its headers and
  cookies go only to the origins its credentials are bound to (the connection's own, else the seeds').
  A context is re-opened within a visit after ``page_slot_reopen_page_after_pages`` loads
  (a page navigated for ever grows its renderer), carrying the visit's cookies and storage over. With a pool of
  several proxies a context is a session: pinned to one exit, which a block bans from the host (the next, fresh one).
- :meth:`SlotBrowser.render` is the seed's failure rule: a failed load (or a page never ready) re-opens the page
  and loads again after ``page_slot_retry_delay_seconds``; every ``page_slot_relaunch_after_failures``-th
  consecutive failure re-launches the browser; at ``page_slot_give_up_after_failures`` it gives up (a snapshot
  of the page kept, the browser closed). A :class:`LoadListener` (the slot) hears each failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import psutil

from harvester.config import SourceConfig, Visitor, visitor_of
from harvester.scraping.browser import page_load as browser_flags
from harvester.scraping.browser.guard_proxy import GuardProxy, UpstreamPool, UpstreamProxy
from harvester.scraping.browser.page_guard import BodyCap, ContextGuard, RequestCharger
from harvester.scraping.browser.page_load import LoadTools, PageLoad, first_line, load_page, user_agent_and_headers
from harvester.scraping.browser.processes import OWNER_FLAG, SLOT_FLAG, find_browser_pid, kill_process_tree
from harvester.scraping.extraction import BlockDetector, recognise_block
from harvester.scraping.fetching import (
    AddressGuard,
    FetchResult,
    KeptCredentials,
    credential_headers,
    credential_origins,
    host_name,
)
from harvester.settings import HarvesterSettings

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = logging.getLogger(__name__)
# A slot has one page, so one renderer process is enough: no spare renderer kept warm beside it.
SLOT_ARGS = ["--renderer-process-limit=1"]
Ending = Literal["ok", "blocked", "gave_up"]


class ProxySettings(Protocol):
    """A country's proxy (``harvester.pageslots.proxies.Proxy``): where, and the credentials for it."""

    @property
    def server(self) -> str: ...

    @property
    def username(self) -> str | None: ...

    @property
    def password(self) -> str | None: ...


class LoadListener(Protocol):
    """Hears the failure rule's steps (the slot moves its record: PREPARING_PAGE, NO_PAGE); may raise to stop."""

    def failed_load(self, failures: int, reason: str) -> None: ...

    def gave_up(self, failures: int, reason: str) -> None: ...


@dataclass
class PageCapture:
    """What a failed or rejected page looked like: its DOM and a screenshot of its viewport (JPEG)."""

    url: str
    html: str
    screenshot: bytes | None


@dataclass
class Render:
    """A task's render by the failure rule: its result, how it ends, and the ``browser_*`` counters it adds."""

    fetch: FetchResult
    ending: Ending = "ok"
    outcomes: Counter[str] = field(default_factory=Counter)
    capture: PageCapture | None = None  # taken when the rule gave up (the browser is closed after it)

    @property
    def transferred_bytes(self) -> int:
        return self.outcomes.get("browser_transferred_bytes", 0)


@dataclass
class Visit:
    """The context a source's visit browses in."""

    source: str | None  # None: a fresh context no source has used yet
    user_agent: str
    context: BrowserContext
    page: Page
    tools: LoadTools
    loads: int = 0
    visitor: Visitor | None = None  # the context's locale and time zone (fixed when it was made)
    exit: str | None = None  # the pool member its session goes out through (a pool of several), banned on a block


class SlotBrowser:
    """One Chromium behind its guard proxy, one context per visit. ``async with SlotBrowser(...) as browser``."""

    def __init__(self, slot_id: str, proxy: ProxySettings | None, settings: HarvesterSettings) -> None:
        self.slot_id, self.proxy, self.settings = slot_id, proxy, settings
        self.proxy_pool: UpstreamPool | None = None  # the country's pool with shared health; else ``proxy`` alone
        self.country: str | None = None  # the slot's: a context no source has used yet presents its visitor
        self.address_guard = AddressGuard.from_settings(settings)
        self.credentials = KeptCredentials()  # a source's connection, resolved once a minute, not per context
        self.playwright: Playwright | None = None
        self.browser: Browser | None = None
        self.guard_proxy: GuardProxy | None = None
        self.visit: Visit | None = None
        self.pid: int | None = None
        self.pages_since_launch = 0
        self.consecutive_failures = 0
        self.launches = 0
        self.reopens = 0  # contexts re-opened within a visit after page_slot_reopen_page_after_pages loads
        self._carried: tuple[str, dict[str, Any]] | None = None  # (source, its visit's cookies and storage)
        self.last_capture: PageCapture | None = None  # the page as the rule gave up on it

    async def __aenter__(self) -> SlotBrowser:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def open(self) -> bool:
        return self.visit is not None and not self.visit.page.is_closed() and self.browser is not None \
            and self.browser.is_connected()

    @property
    def page(self) -> Page | None:
        return self.visit.page if self.visit is not None else None

    # -- launching ---------------------------------------------------------------------------------
    async def ensure_browser(self) -> Browser:
        if self.browser is not None and self.browser.is_connected():
            return self.browser
        await self.close_browser()
        if self.playwright is None:
            from playwright.async_api import async_playwright

            self.playwright = await async_playwright().start()
        if self.guard_proxy is None:
            upstream: UpstreamPool | UpstreamProxy | None = self.proxy_pool or (
                None if self.proxy is None else UpstreamProxy.from_server(
                    self.proxy.server, self.proxy.username, self.proxy.password))
            self.guard_proxy = GuardProxy(self.address_guard, upstream)
            await self.guard_proxy.start()
        args = [*browser_flags.CHROMIUM_ARGS, *SLOT_ARGS, *browser_flags.GUARD_ARGS, f"{SLOT_FLAG}{self.slot_id}",
                f"{OWNER_FLAG}{os.getpid()}"]
        self.browser = await self.playwright.chromium.launch(
            executable_path=str(self.settings.chromium_executable), headless=True, args=args,
            chromium_sandbox=self.settings.chromium_sandbox, proxy={"server": self.guard_proxy.server})
        self.launches += 1
        self.pages_since_launch = 0
        self.pid = find_browser_pid(self.slot_id)
        log.info("slot %s: browser launched (pid %s, proxy %s)", self.slot_id, self.pid,
                 self.proxy.server if self.proxy else "none: direct")
        return self.browser

    async def ensure_page(self, source: SourceConfig | None, url: str = "") -> Page:
        """The page of ``source``'s visit: the current one, or one in a fresh context (see the module docstring).
        ``None``: any open page (a slot preparing its first). Raises when Chromium fails."""
        visit = self.visit
        if source is None:
            if self.open and visit is not None:
                return visit.page
            return (await self._new_visit(None, self.settings.user_agent, url)).page
        user_agent, _ = user_agent_and_headers(source, self.settings)
        if self.open and visit is not None and visit.user_agent == user_agent \
                and visit.visitor == self._visitor_for(source):
            if visit.source is None and visit.loads == 0 and self._adoptable(source):
                visit.source = source.name  # a fresh context nobody used: this visit's
                await self._dress(visit, source)
                return visit.page
            if visit.source == source.name and source.browser.isolation == "visit":
                if visit.loads < self.settings.page_slot_reopen_page_after_pages:
                    return visit.page
                self.reopens += 1
                self._carried = await self._storage_state(visit)
        return (await self._new_visit(source, user_agent, url)).page

    def _visitor_for(self, source: SourceConfig | None) -> Visitor | None:
        """A source's visitor (its ``visitor`` over its country's); a neutral context's: the slot country's."""
        return source.presented_visitor if source is not None else visitor_of(self.country)

    @staticmethod
    def _adoptable(source: SourceConfig) -> bool:
        """A neutral context can become a source's when nothing of it is set at creation (WebSockets' route)."""
        return source.browser.websockets == "refuse" and source.http_connection_id is None

    async def _session_exit(self, url: str) -> tuple[str, str] | None:
        """A new context's exit (a pool of several): the member the pool offers the host first, and its listener."""
        pool = self.guard_proxy.pool if self.guard_proxy is not None else None
        candidates = await pool.candidates(host_name(url)) if pool is not None else []
        if len(candidates) < 2 or self.guard_proxy is None:
            return None
        return candidates[0].name, await self.guard_proxy.pinned(candidates[0].name)

    async def _new_visit(self, source: SourceConfig | None, user_agent: str, url: str = "") -> Visit:
        carried_over, self._carried = self._carried, None
        # a visit's own cookies and storage only, and never a task-isolated source's from another task
        carried = carried_over[1] if carried_over is not None and source is not None \
            and carried_over[0] == source.name else None
        browser = await self.ensure_browser()
        session_exit = await self._session_exit(url)
        visitor = self._visitor_for(source)
        presented = {} if visitor is None else {name: value for name, value in
                                                (("locale", visitor.locale), ("timezone_id", visitor.timezone_id))
                                                if value}
        _, context = await asyncio.gather(  # the old context closes while the new one opens
            self.close_page(), browser.new_context(user_agent=user_agent, service_workers="block",
                                                   accept_downloads=False, **presented, **(
                                                       {"proxy": {"server": session_exit[1]}} if session_exit else {}),
                                                   **({"storage_state": carried} if carried else {})))
        try:
            guard = ContextGuard(source or _NEUTRAL, self.address_guard)
            # routed BEFORE the page opens, never while it opens: Playwright enables a context route's
            # interception only on the pages it has finished initialising, and a page still initialising reads
            # "no routes" then and keeps it, so none of its requests would reach the guard (no credentials, no
            # blocking, no rate tokens: CI saw a credentialed source's page fetched anonymously)
            await guard.attach(context)
            page = await context.new_page()
            cap = BodyCap(self.settings.body_size_cap_bytes)
            await cap.attach(context, page)
        except BaseException:  # a visit that failed to open closes its context before the error propagates
            with contextlib.suppress(Exception):  # the context may be half made; the original error matters
                await context.close()
            raise
        assert self.guard_proxy is not None  # started with the browser
        self.visit = Visit(source.name if source else None, user_agent, context, page,
                           LoadTools(page, guard, cap, self.guard_proxy), visitor=visitor,
                           exit=session_exit[0] if session_exit else None)
        if source is not None:
            await self._dress(self.visit, source)
        return self.visit

    async def _dress(self, visit: Visit, source: SourceConfig) -> None:
        """The source's side of a context: its headers, and its HTTP connection's (cookies on this context)."""
        _, headers = user_agent_and_headers(source, self.settings)
        visit.tools.guard.source = source
        visit.tools.guard.blocked_types = frozenset(source.blocked_resource_types)
        if headers:
            await visit.context.set_extra_http_headers(headers)
        credentials = self.credentials.of(source)
        if credentials is not None:
            sent = credential_headers(credentials)
            sent.pop("Cookie", None)
            visit.tools.guard.credential_headers = sent
            visit.tools.guard.connection_cookies = dict(credentials.cookies)
            visit.tools.guard.credential_origins = credential_origins(source, credentials)  # as the fetcher's

    @staticmethod
    async def _storage_state(visit: Visit) -> tuple[str, dict[str, Any]] | None:
        if visit.source is None:
            return None
        try:
            return visit.source, dict(await visit.context.storage_state())
        except Exception as error:  # a crashed context has nothing to carry: said, since the visit's login goes too
            log.warning("visit of %s: its cookies and storage could not be carried to the next context: %s",
                        visit.source, first_line(error))
            return None

    # -- one load, and the rule --------------------------------------------------------------------
    async def load(self, url: str, source: SourceConfig, kind: str = "details",
                   charger: RequestCharger | None = None) -> PageLoad:
        """One attempt at ``url`` in ``source``'s visit."""
        await self.ensure_page(source, url)
        assert self.visit is not None  # ensure_page opened it
        visit = self.visit
        loaded = await load_page(visit.tools, url, source, kind, self.settings, charger)
        visit.loads += 1
        if not loaded.load_failed:
            self.pages_since_launch += 1
        return loaded  # a task-isolated source's context stays open for its evidence; its next task gets a new one

    async def render(self, url: str, source: SourceConfig, kind: str = "details",
                     charger: RequestCharger | None = None, listener: LoadListener | None = None) -> Render:
        """``url`` loaded by the failure rule (see the module docstring); never raises for what a site or the
        browser does (a listener may raise to stop the rule)."""
        render = Render(FetchResult(url, "ok"))
        started_at = time.time()  # the queue latency ends at the first attempt, whatever the retries
        while True:
            loaded = await self._attempt(url, source, kind, charger)
            loaded.fetch.started_at = started_at
            _count(render.outcomes, loaded)
            render.fetch = loaded.fetch
            if not loaded.load_failed:
                self.consecutive_failures = 0
                render.ending = self._ending(render.fetch, source)
                if render.ending == "blocked":
                    await self._ban_exit(url, render.outcomes)
                return render
            if await self.failed_load(loaded.fetch.reason, render.outcomes, listener):
                render.capture, self.last_capture = self.last_capture, None
                render.ending = "gave_up"
                gave_up_after = self.settings.page_slot_give_up_after_failures
                render.fetch.reason = (f"{render.fetch.reason} (page slot gave up after {gave_up_after} consecutive "
                                       "failed loads)")
                return render

    async def _attempt(self, url: str, source: SourceConfig, kind: str, charger: RequestCharger | None) -> PageLoad:
        try:
            return await self.load(url, source, kind, charger)
        except Exception as error:  # the browser crashed or could not start
            reason = f"browser could not open a page: {type(error).__name__}: {first_line(error)}"
            return PageLoad(FetchResult(url, "connection_error", reason=reason), load_failed=True)

    async def _ban_exit(self, url: str, outcomes: Counter[str]) -> None:
        """A block bans the visit's exit from the host (every worker's): the next context goes out another way."""
        visit, guard = self.visit, self.guard_proxy
        if visit is not None and visit.exit and guard is not None and guard.pool is not None:
            await guard.pool.ban(visit.exit, host_name(url))
            outcomes["sessions_retired_for_blocks"] += 1

    def _ending(self, fetch: FetchResult, source: SourceConfig) -> Ending:
        """A page the block markers recognise is a block like a 403: the slot closes its page, so the next task
        gets a fresh context (new cookies, storage), and the task is retried."""
        detector = BlockDetector.for_source(source, self.settings.block_markers)
        if (block := recognise_block(detector, fetch.outcome, fetch.status, fetch.text)) is not None:
            fetch.outcome, fetch.reason = block
        return "blocked" if fetch.outcome == "blocked" else "ok"

    async def failed_load(self, reason: str, outcomes: Counter[str], listener: LoadListener | None = None) -> bool:
        """The rule after one failed load: True when it gave up (browser closed), else the page was re-opened
        (or the browser closed for a relaunch) and the retry delay waited."""
        self.consecutive_failures += 1
        failures = self.consecutive_failures
        outcomes["browser_failed_loads"] += 1
        log.warning("slot %s: failed load %d: %s", self.slot_id, failures, reason)
        if failures >= self.settings.page_slot_give_up_after_failures:
            outcomes["browser_gave_up"] += 1
            self.consecutive_failures = 0
            self.last_capture = await self.capture()
            await self.close_browser()
            if listener is not None:
                listener.gave_up(failures, reason)
            return True
        if listener is not None:
            listener.failed_load(failures, reason)
        if failures % self.settings.page_slot_relaunch_after_failures == 0:
            outcomes["browser_relaunches"] += 1
            await self.close_browser()
        else:
            await self.close_page(keep_visit=True)
        await asyncio.sleep(self.settings.page_slot_retry_delay_seconds)
        return False

    async def prepare(self, listener: LoadListener | None = None) -> bool:
        """Open a page by the rule (a slot in PREPARING_PAGE); False when it gave up."""
        while True:
            try:
                await self.ensure_page(None)
            except Exception as error:  # Chromium missing or crashing at launch: a failed load like any other
                reason = f"browser could not open a page: {type(error).__name__}: {first_line(error)}"
                if await self.failed_load(reason, Counter(), listener):
                    return False
                continue
            self.consecutive_failures = 0
            return True

    async def capture(self) -> PageCapture | None:
        """The open page's DOM and viewport as they are now (bounded in time; None without a page)."""
        visit = self.visit
        if visit is None or visit.page.is_closed():
            return None
        html = ""
        screenshot = None
        with contextlib.suppress(Exception):  # evidence is best effort: a crashed page still yields its screenshot
            html = await asyncio.wait_for(visit.page.content(), 5)
        with contextlib.suppress(Exception):  # best effort likewise: the HTML alone is still evidence
            screenshot = await visit.page.screenshot(type="jpeg", quality=60, timeout=5000, animations="disabled")
        return PageCapture(visit.page.url, html, screenshot)

    # -- closing and memory -----------------------------------------------------------------------
    def rss_mb(self) -> float:
        """Resident memory of the browser's process tree (a long-lived Chromium grows)."""
        if self.pid is None:
            return 0.0
        try:
            root = psutil.Process(self.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0
        for process in processes:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total / (1024 * 1024)

    async def close_page(self, keep_visit: bool = False) -> None:
        """Close the context; ``keep_visit``: its cookies and storage go to the visit's next context."""
        visit, self.visit = self.visit, None
        if not keep_visit:
            self._carried = None
        if visit is None:
            return
        if keep_visit:
            self._carried = await self._storage_state(visit)
        with contextlib.suppress(Exception):  # a crashed browser has nothing left to close
            await asyncio.wait_for(visit.context.close(), 10)

    async def close_browser(self) -> None:
        await self.close_page()
        browser, self.browser = self.browser, None
        pid, self.pid = self.pid, None
        if browser is not None:
            with contextlib.suppress(Exception):  # a hung or dead browser: its process tree is killed next
                await asyncio.wait_for(browser.close(), 10)
        if pid is not None:
            kill_process_tree(pid)

    async def close(self) -> None:
        await self.close_browser()
        guard, self.guard_proxy = self.guard_proxy, None
        if guard is not None:
            await guard.close()
        playwright, self.playwright = self.playwright, None
        if playwright is not None:
            with contextlib.suppress(Exception):  # the driver may have died with the browser; nothing is left to stop
                await asyncio.wait_for(playwright.stop(), 10)


_NEUTRAL = SourceConfig.model_construct(name="", blocked_resource_types=["image", "font", "media"])


def _count(outcomes: Counter[str], loaded: PageLoad) -> None:
    """One attempt's counters into the task's ``browser_*`` outcomes."""
    for name, amount in loaded.blocked.items():
        outcomes[f"browser_blocked:{name}"] += amount
        outcomes["browser_blocked_requests"] += amount
    for name, amount in loaded.actions.items():
        outcomes[f"browser_actions:{name}"] += amount
    for name, amount in (("browser_transferred_bytes", loaded.transferred_bytes),
                         ("browser_site_requests", loaded.site_requests),
                         ("browser_sub_requests", loaded.sub_requests),
                         ("proxy_error", loaded.proxy_errors)):
        if amount:
            outcomes[name] += amount


async def render_page(url: str, source: SourceConfig, settings: HarvesterSettings, kind: str = "details"
                      ) -> FetchResult:
    """Render ``url`` in a slot browser of its own (`harvester try`), by the same rule, browsing directly."""
    started, started_at = time.monotonic(), time.time()
    async with SlotBrowser("try", None, settings) as browser:
        render = await browser.render(url, source, kind)
    render.fetch.blocked_requests = render.outcomes.get("browser_blocked_requests", 0)
    render.fetch.elapsed, render.fetch.started_at = time.monotonic() - started, started_at
    return render.fetch
