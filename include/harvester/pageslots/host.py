"""One page slot hosted in one OS process (DESIGN.md section 5): the ``harvester.host_page_slot`` task.

A slot host is a Celery worker on the ``pageslots`` queue; each of its pool processes hosts at most one
slot at a time. :func:`host_slot` claims the slot record (refused if another process owns it: a slot
never runs twice), launches one Chromium through its country's proxy with one page, and serves that
country's admitted browser tasks from the Redis list the distributor fills, one at a time, handing
each rendered page to the same settle path as HTTP pages (extract, bulk write, release, count down).
A thread heartbeats the slot record and the running task's lease, and brings the allocator's orders
(close, delete, move) back to the loop.

Failure rules: a failed load re-opens the page and loads again (RUNNING_SCRAPING_TASK -> PREPARING_PAGE);
every ``page_slot_relaunch_after_failures`` (4) consecutive failures the browser is re-launched; at
``page_slot_give_up_after_failures`` (7) the task is given up and the slot goes back to NO_PAGE; a
blocked task (403, 451 or a block marker) closes the page (CLOSING_PAGE -> NO_PAGE). The browser is
recycled after ``page_slot_recycle_after_pages`` pages or when its process tree's RSS passes
``page_slot_recycle_rss_mb``. Whatever stops the process, its Chromium is killed: on exit by its
process tree, and otherwise by :func:`reap_orphan_browsers`, which every slot host runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil
import redis

from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import SlotEnded
from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.pageslots.browser_host import BrowserHost, BrowserPageFetcher
from harvester.pageslots.proxies import Proxy, ProxyNotConfigured, require_proxy
from harvester.pageslots.registry import KEYS, Orders, SlotRegistry, SlotState, SlotTransitionRefused
from harvester.scraping import (
    CHROMIUM_ARGS,
    AddressGuard,
    FetchResult,
    PageLoad,
    ResourceBlocker,
    load_page,
    user_agent_and_headers,
)
from harvester.settings import HarvesterSettings, get_settings

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

__all__ = ["BrowserHost", "BrowserPageFetcher", "PageSlotHost", "SlotBrowser", "SlotState", "host_slot",
           "reap_orphan_browsers"]

log = logging.getLogger("harvester.pageslots.host")
SLOT_FLAG = "--harvester-slot="  # Chromium ignores unknown switches; ours name the slot and its owner
OWNER_FLAG = "--harvester-slot-owner="
# A slot has one page, so one renderer process is enough: no spare renderer kept warm beside it.
SLOT_CHROMIUM_ARGS = [*CHROMIUM_ARGS, "--renderer-process-limit=1"]


# -- the browser of one slot ---------------------------------------------------------------------------
class SlotBrowser:
    """One Chromium with one page, browsing through one country's proxy."""

    def __init__(self, slot_id: str, proxy: Proxy | None, settings: HarvesterSettings) -> None:
        self.slot_id, self.proxy, self.settings = slot_id, proxy, settings
        self.playwright: Playwright | None = None
        self.browser: Browser | None = None
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.blocker = ResourceBlocker(AddressGuard.from_settings(self.settings))
        self.user_agent = ""
        self.pid: int | None = None
        self.pages_since_launch = 0
        self.pages_on_page = 0  # loads since the page was opened: re-opened after page_slot_reopen_page_after_pages
        self.launches = 0
        self.reopens = 0

    @property
    def open(self) -> bool:
        return self.page is not None and not self.page.is_closed() and self.browser is not None \
            and self.browser.is_connected()

    async def ensure_page(self, source: SourceConfig | None) -> Page:
        """The open page, or a new one (launching the browser if needed). Raises when Chromium fails."""
        user_agent = user_agent_and_headers(source, self.settings)[0] if source else self.settings.user_agent
        worn = self.pages_on_page >= self.settings.page_slot_reopen_page_after_pages
        if self.open and not worn and (source is None or user_agent == self.user_agent):
            return self.page  # type: ignore[return-value]
        if self.open and worn:
            self.reopens += 1  # a long-navigated page keeps growing its renderer: a fresh one costs ~50 ms
        await self.close_page()
        browser = await self._ensure_browser()
        self.context = await browser.new_context(user_agent=user_agent)
        self.user_agent = user_agent
        self.page = await self.context.new_page()
        self.pages_on_page = 0
        self.blocker = ResourceBlocker(AddressGuard.from_settings(self.settings))
        await self.blocker.attach(self.page)
        return self.page

    async def _ensure_browser(self) -> Browser:
        if self.browser is not None and self.browser.is_connected():
            return self.browser
        await self.close_browser()
        if self.playwright is None:
            from playwright.async_api import async_playwright

            self.playwright = await async_playwright().start()
        args = [*SLOT_CHROMIUM_ARGS, f"{SLOT_FLAG}{self.slot_id}", f"{OWNER_FLAG}{os.getpid()}"]
        options: dict[str, Any] = {"executable_path": str(self.settings.chromium_executable), "headless": True,
                                   "args": args, "chromium_sandbox": self.settings.chromium_sandbox}
        if self.proxy is not None:
            options["proxy"] = self.proxy.playwright()  # Playwright also sends loopback through it
        self.browser = await self.playwright.chromium.launch(**options)
        self.launches += 1
        self.pages_since_launch = 0
        self.pid = find_browser_pid(self.slot_id)
        log.info("slot %s: browser launched (pid %s, proxy %s)", self.slot_id, self.pid,
                 self.proxy.server if self.proxy else "none: direct")
        return self.browser

    async def load(self, url: str, source: SourceConfig) -> PageLoad:
        page = await self.ensure_page(source)
        loaded = await load_page(page, self.blocker, url, source, self.settings)
        self.pages_on_page += 1
        if not loaded.load_failed:
            self.pages_since_launch += 1
        return loaded

    def rss_mb(self) -> float:
        """Resident memory of the browser's process tree (long-lived Chromium grows)."""
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

    async def close_page(self) -> None:
        context, self.context, self.page = self.context, None, None
        if context is not None:
            with contextlib.suppress(Exception):  # a crashed browser has nothing left to close
                await context.close()

    async def close_browser(self) -> None:
        await self.close_page()
        browser, self.browser = self.browser, None
        pid, self.pid = self.pid, None
        if browser is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 10)
        if pid is not None:
            kill_process_tree(pid)

    async def close(self) -> None:
        await self.close_browser()
        playwright, self.playwright = self.playwright, None
        if playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(playwright.stop(), 10)


def _flag_value(command: list[str], flag: str) -> str | None:
    for argument in command:
        if argument.startswith(flag):
            return argument[len(flag):]
    return None


def find_browser_pid(slot_id: str) -> int | None:
    """The Chromium browser process (not a renderer) launched for ``slot_id`` by this process."""
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = process.cmdline()
            if _flag_value(command, SLOT_FLAG) == slot_id and not any(a.startswith("--type=") for a in command):
                return process.pid
    return None


def kill_process_tree(pid: int) -> int:
    """SIGKILL a process and everything under it; returns how many were killed."""
    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.Error:
        return 0
    killed = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
            killed += 1
    psutil.wait_procs(processes, timeout=5)
    return killed


def reap_orphan_browsers() -> list[int]:
    """Kill slot browsers whose owning process is gone (a slot process SIGKILLed leaves its Chromium)."""
    reaped = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        command = process.info.get("cmdline") or []
        owner = _flag_value(command, OWNER_FLAG)
        if owner is None or any(a.startswith("--type=") for a in command):
            continue
        try:
            owner_alive = psutil.pid_exists(int(owner)) and psutil.Process(int(owner)).status() != "zombie"
        except (ValueError, psutil.Error):
            owner_alive = False
        if not owner_alive:
            log.warning("killing orphan slot browser pid %s (slot %s, owner %s gone)", process.pid,
                        _flag_value(command, SLOT_FLAG), owner)
            kill_process_tree(process.pid)
            reaped.append(process.pid)
    return reaped


# -- heartbeat -------------------------------------------------------------------------------------------
class SlotHeartbeat:
    """Heartbeats the slot record and the running task's lease from a thread (a page load may take its whole
    timeout), and keeps the latest orders for the loop. ``lost`` once the slot is no longer ours."""

    def __init__(self, client: redis.Redis, settings: HarvesterSettings, slot_id: str, owner: str,
                 browser_pid: Callable[[], int | None]) -> None:
        from harvester.distributor import RateLimitStore

        self.registry = SlotRegistry(client)
        self.store = RateLimitStore(client, settings)
        self.slot_id, self.owner, self.browser_pid = slot_id, owner, browser_pid
        self.interval = settings.page_slot_heartbeat_seconds
        self.orders: Orders | None = None
        self.lost = False
        self.task: tuple[str, str, str] | None = None  # (source, task id, lease token) while one runs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"slot-heartbeat-{slot_id}", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def beat(self) -> Orders | None:
        try:
            orders = self.registry.heartbeat(self.slot_id, self.owner, self.browser_pid())
            task = self.task
            if task is not None:
                self.store.heartbeat(task[0], {task[1]: task[2]})
        except redis.RedisError as error:  # Redis restarting: keep going, the loop retries too
            log.warning("slot %s: heartbeat failed: %s", self.slot_id, error)
            return self.orders
        if orders is None:
            self.lost = True
        else:
            self.orders = orders
        return orders

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()
            if self.lost:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# -- the slot ------------------------------------------------------------------------------------------
@dataclass
class SlotReport:
    """What one hosting of a slot did (returned by the Celery task, and for tests)."""

    slot_id: str
    outcome: str = ""  # why it ended
    tasks: int = 0
    pages: int = 0
    failed_loads: int = 0
    relaunches: int = 0
    recycles: int = 0
    launches: int = 0
    blocked_closes: int = 0
    gave_up: int = 0
    blocked_requests: Counter[str] = field(default_factory=Counter)
    transferred_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "blocked_requests"},
                "blocked_requests": dict(self.blocked_requests)}


class PageSlotHost:
    """Hosts one slot until it lands in NO_PAGE (or is taken away). ``PageSlotHost(slot_id).run()``."""

    def __init__(self, slot_id: str, settings: HarvesterSettings | None = None, host: str | None = None,
                 runner: Any = None) -> None:
        self.slot_id = slot_id
        self.settings = settings or get_settings()
        self.host = host or socket.gethostname()
        self.owner = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        from harvester.connections import redis_client

        self.redis = redis_client(settings=self.settings)
        self.blocking = redis_client(settings=self.settings, blocking_seconds=self.settings.page_slot_task_wait_seconds)
        self.registry = SlotRegistry(self.redis)
        self.book = BrowserTaskBook(self.redis, self.settings.allocation_sample_size)
        self.report = SlotReport(slot_id)
        self.country = ""
        self.state = SlotState.PREPARING_PAGE
        self.failures = 0
        self.last_used = time.monotonic()
        self.stopping = threading.Event()
        self._runner = runner
        self.browser: SlotBrowser | None = None
        self.heartbeat: SlotHeartbeat | None = None

    @property
    def runner(self) -> Any:
        """The pipeline's settle path, given by the worker that hosts the slot (the same object its HTTP
        batches use: ``finish(source, messages, fetches, outcomes)`` and ``sources.get(name)``)."""
        if self._runner is None:
            raise RuntimeError("a slot host needs the pipeline's settle path (runner=...)")
        return self._runner

    # -- life cycle ---------------------------------------------------------------------------------
    def run(self) -> SlotReport:
        status = self.registry.claim(self.slot_id, self.owner, self.host, os.getpid(),
                                     2 * self.settings.page_slot_heartbeat_seconds)
        if status != "ok":
            self.report.outcome = f"not claimed: {status}"
            log.info("slot %s not hosted here: %s", self.slot_id, status)
            return self.report
        record = self.registry.get(self.slot_id)
        self.country = record.country if record else ""
        previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        if previous is not None:
            signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        try:
            asyncio.run(self._host())
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        log.info("slot %s (%s) stopped hosting: %s", self.slot_id, self.country, self.report.outcome)
        return self.report

    async def _host(self) -> None:
        try:
            proxy = require_proxy(self.country, self.settings.page_slot_allow_direct_connections)
        except ProxyNotConfigured as error:
            self._transition(SlotState.NO_PAGE, reason=str(error))
            self.report.outcome = str(error)
            return
        self.browser = SlotBrowser(self.slot_id, proxy, self.settings)
        self.heartbeat = SlotHeartbeat(self.redis, self.settings, self.slot_id, self.owner,
                                       lambda: self.browser.pid if self.browser else None)
        self.heartbeat.start()
        try:
            await self._prepare()
            while True:
                await self._serve_one()
        except SlotEnded as ended:
            self.report.outcome = str(ended)
        finally:
            self.heartbeat.stop()
            await self.browser.close()
            self.report.launches = self.browser.launches
            if not self.heartbeat.lost:
                self._land()

    def _land(self) -> None:
        """Whatever ended the hosting, leave the record in NO_PAGE along legal transitions (best effort:
        a record left behind is reset by the next host after two missed heartbeats)."""
        path = {SlotState.PREPARING_PAGE: [SlotState.NO_PAGE],
                SlotState.PAGE_READY: [SlotState.CLOSING_PAGE, SlotState.NO_PAGE],
                SlotState.RUNNING_SCRAPING_TASK: [SlotState.CLOSING_PAGE, SlotState.NO_PAGE],
                SlotState.CLOSING_PAGE: [SlotState.NO_PAGE]}.get(self.state, [])
        for target in path:
            try:
                self.registry.transition(self.slot_id, target, self.owner, reason=self.report.outcome[:300])
                self.state = target
            except (SlotTransitionRefused, redis.RedisError):
                return

    async def _prepare(self) -> None:
        """PREPARING_PAGE: launch the browser through the proxy and open the page, by the failure rules."""
        while True:
            self._check_stop()
            try:
                await self.browser.ensure_page(None)  # type: ignore[union-attr]
            except Exception as error:  # Chromium missing or crashing at launch: a failed load like any other
                reason = f"browser could not open a page: {type(error).__name__}: {str(error).splitlines()[0]}"
                await self._failed_load(reason)
                continue
            self.failures = 0
            self._transition(SlotState.PAGE_READY, fields={"consecutive_failures": 0})
            return

    async def _failed_load(self, reason: str) -> None:
        """Count a failed load in PREPARING_PAGE; relaunch every 4th, give the slot up at the 7th."""
        self.failures += 1
        self.report.failed_loads += 1
        log.warning("slot %s: failed load %d: %s", self.slot_id, self.failures, reason)
        if self.failures >= self.settings.page_slot_give_up_after_failures:
            self.report.gave_up += 1
            await self.browser.close_browser()  # type: ignore[union-attr]
            self._transition(SlotState.NO_PAGE,
                             reason=f"{reason} (gave up after {self.failures} consecutive failed loads)")
            raise SlotEnded(f"gave up after {self.failures} consecutive failed loads: {reason}")
        self._transition(SlotState.PREPARING_PAGE, reason=reason, fields={"consecutive_failures": self.failures})
        if self.failures % self.settings.page_slot_relaunch_after_failures == 0:
            self.report.relaunches += 1
            await self.browser.close_browser()  # type: ignore[union-attr]
        else:
            await self.browser.close_page()  # type: ignore[union-attr]
        await asyncio.sleep(self.settings.page_slot_retry_delay_seconds)

    def _check_stop(self) -> None:
        if self.stopping.is_set():
            self._leave("the slot host is stopping")
        if self.heartbeat is not None and self.heartbeat.lost:
            raise SlotEnded("the slot record was reset or taken over")

    def _leave(self, reason: str) -> None:
        raise SlotEnded(reason)

    async def _close(self, reason: str) -> None:
        """PAGE_READY/RUNNING -> CLOSING_PAGE -> close the browser -> NO_PAGE (deleted or moved by orders)."""
        if self.state != SlotState.CLOSING_PAGE:
            self._transition(SlotState.CLOSING_PAGE, reason=reason)
        await self.browser.close_browser()  # type: ignore[union-attr]
        outcome = self._transition(SlotState.NO_PAGE, reason=reason)
        raise SlotEnded(f"{reason} ({outcome})")

    # -- one task -----------------------------------------------------------------------------------
    async def _serve_one(self) -> None:
        if self.stopping.is_set():
            if self.state in (SlotState.PAGE_READY, SlotState.CLOSING_PAGE):
                await self._close("the slot host is stopping")
            self._leave("the slot host is stopping")
        self._check_stop()
        orders = self.heartbeat.orders if self.heartbeat else None
        if orders is not None and orders.state == SlotState.CLOSING_PAGE:
            self.state = SlotState.CLOSING_PAGE  # idle closing by the page_slots DAG
            await self._close("closed by close_idle_page_slots")
        if orders is not None and orders.leaving:
            await self._close("deleted by the allocator" if orders.retire else f"moving to {orders.next_country}")
        if time.monotonic() - self.last_used >= self.settings.page_slot_idle_seconds:
            await self._close(f"idle for {self.settings.page_slot_idle_seconds:g}s")
        await self._recycle_if_due()
        raw = await asyncio.to_thread(self._pop_task)
        if raw is None:
            return
        message = TaskMessage.model_validate_json(raw)
        member = task_member(message.source, message.task_id)
        status = self.registry.begin_task(self.slot_id, self.owner, self.country, raw, member)
        if status != "ok":
            fresh = self.heartbeat.beat() if self.heartbeat else None  # learn why: orders, reset
            if fresh is not None and fresh.state == SlotState.CLOSING_PAGE:
                self.state = SlotState.CLOSING_PAGE
            return
        self.state = SlotState.RUNNING_SCRAPING_TASK
        self.last_used = time.monotonic()
        await self._run_task(message, member)

    def _pop_task(self) -> str | None:
        try:
            popped = self.blocking.blpop([KEYS.browser_tasks(self.country)],
                                      timeout=self.settings.page_slot_task_wait_seconds)
        except redis.RedisError as error:  # Redis restarting: wait a little, the loop tries again
            log.warning("slot %s: waiting for tasks failed: %s", self.slot_id, error)
            time.sleep(min(1.0, self.settings.page_slot_task_wait_seconds))
            return None
        if popped is None:
            return None
        raw = popped[1]
        return raw.decode() if isinstance(raw, bytes) else raw

    async def _run_task(self, message: TaskMessage, member: str) -> None:
        from harvester.distributor import RateLimitStore

        store = RateLimitStore(self.redis, self.settings)
        token = message.lease_token or ""
        if not token or not store.start(message.source, {message.task_id: token}).held:
            # no longer reserved under this token (reaped and handed on, or a duplicate): never fetch
            # outside admission (issue 11)
            self._transition(SlotState.PAGE_READY)
            return
        self.heartbeat.task = (message.source, message.task_id, token)  # type: ignore[union-attr]
        try:
            try:
                source = self.runner.sources.get(message.source)
            except Exception as error:  # a broken or deleted YAML file: hand the task back, keep the page
                store.fail(message, f"source config {message.source!r} could not be loaded: {error}")
                self.book.completed([member])
                self._transition(SlotState.PAGE_READY)
                return
            await self._rate_token(store, message.source)
            fetch, ending = await self._render(message.url, source)
            self.report.tasks += 1
            outcomes = self._outcomes(fetch)
            await asyncio.to_thread(self.runner.finish, source, [message], [fetch], outcomes)
            self.book.completed([member])
            self._count_bytes(source, outcomes.get("browser_transferred_bytes", 0))
        finally:
            self.heartbeat.task = None  # type: ignore[union-attr]
            self.last_used = time.monotonic()
        if ending == "blocked":
            self.report.blocked_closes += 1
            await self._close(f"blocked: {fetch.reason}")
        if ending == "gave_up":
            raise SlotEnded(f"gave up after {self.failures} consecutive failed loads: {fetch.reason}")
        if self.state == SlotState.RUNNING_SCRAPING_TASK:
            self._transition(SlotState.PAGE_READY, fields={"pages_served": "+1", "consecutive_failures": 0})
        else:
            self.registry.redis.hincrby(KEYS.slot(self.slot_id), "pages_served", 1)

    @staticmethod
    async def _rate_token(store: Any, source: str) -> None:
        """Wait for one of the source's per_minute tokens: taken at fetch time, as the site sees it (issue 11)."""
        while True:
            try:
                wait = await asyncio.to_thread(store.acquire_fetch, source)
            except redis.RedisError as error:  # Redis restarting: no token, no request; look again shortly
                log.warning("rate token of %s unavailable: %s", source, error)
                wait = 0.5
            if wait <= 0:
                return
            await asyncio.sleep(min(wait, 1.0))

    async def _render(self, url: str, source: SourceConfig) -> tuple[FetchResult, str]:
        """Load ``url`` by the failure rules; returns the result and how the slot ends it: ok, blocked, gave_up."""
        self._loaded_bytes = 0
        self._loaded_blocked: Counter[str] = Counter()
        self._task_counts: Counter[str] = Counter()
        started_at = time.time()  # the queue latency ends at the first attempt, whatever the retries
        while True:
            try:
                loaded = await self.browser.load(url, source)  # type: ignore[union-attr]
            except Exception as error:  # the browser crashed or could not start
                reason = f"browser could not open a page: {type(error).__name__}: {str(error).splitlines()[0]}"
                loaded = PageLoad(FetchResult(url, "connection_error", reason=reason), load_failed=True)
            loaded.fetch.started_at = started_at
            self._loaded_bytes += loaded.transferred_bytes
            self._loaded_blocked.update(loaded.blocked)
            if not loaded.load_failed:
                self.failures = 0
                self.report.pages += 1
                fetch = loaded.fetch
                marker = next((m for m in self.settings.page_slot_block_markers if m and m in fetch.text), None)
                if marker is not None and fetch.outcome == "ok":
                    fetch.outcome, fetch.reason = "blocked", f"block marker {marker!r} in the page"
                if self.state == SlotState.PREPARING_PAGE:
                    self._transition(SlotState.PAGE_READY, fields={"consecutive_failures": 0, "pages_served": "+1"})
                return fetch, "blocked" if fetch.outcome == "blocked" else "ok"
            self.failures += 1
            self.report.failed_loads += 1
            self._task_counts["browser_failed_loads"] += 1
            fetch = loaded.fetch
            log.warning("slot %s: load %d of %s failed: %s", self.slot_id, self.failures, url, fetch.reason)
            if self.failures >= self.settings.page_slot_give_up_after_failures:
                self.report.gave_up += 1
                self._task_counts["browser_gave_up"] += 1
                await self.browser.close_browser()  # type: ignore[union-attr]
                fetch.reason = f"{fetch.reason} (page slot gave up after {self.failures} consecutive failed loads)"
                self._transition(SlotState.NO_PAGE, reason=fetch.reason)
                return fetch, "gave_up"
            self._transition(SlotState.PREPARING_PAGE, reason=fetch.reason,
                             fields={"consecutive_failures": self.failures})
            if self.failures % self.settings.page_slot_relaunch_after_failures == 0:
                self.report.relaunches += 1
                self._task_counts["browser_relaunches"] += 1
                await self.browser.close_browser()  # type: ignore[union-attr]
            else:
                await self.browser.close_page()  # type: ignore[union-attr]
            await asyncio.sleep(self.settings.page_slot_retry_delay_seconds)

    def _outcomes(self, fetch: FetchResult) -> dict[str, int]:
        outcomes: Counter[str] = Counter(self._task_counts)
        if fetch.outcome == "blocked":
            outcomes["browser_blocked_closes"] += 1
        blocked = self._loaded_blocked
        if blocked:
            outcomes["browser_blocked_requests"] = sum(blocked.values())
            for resource_type, amount in blocked.items():
                outcomes[f"browser_blocked:{resource_type}"] = amount
            self.report.blocked_requests.update(blocked)
        if self._loaded_bytes:
            outcomes["browser_transferred_bytes"] = self._loaded_bytes
            self.report.transferred_bytes += self._loaded_bytes
        fetch.blocked_requests = sum(blocked.values())
        return dict(outcomes)

    def _count_bytes(self, source: SourceConfig, amount: int) -> None:
        """Bytes browsed through the country's proxy, per country and per source."""
        if not amount:
            return
        pipeline = self.redis.pipeline(transaction=False)
        pipeline.hincrby(KEYS.proxy_bytes, f"country:{self.country}", amount)
        pipeline.hincrby(KEYS.proxy_bytes, f"source:{source.name}", amount)
        pipeline.execute()

    async def _recycle_if_due(self) -> None:
        browser = self.browser
        if browser is None or browser.browser is None:
            return
        reason = None
        if browser.pages_since_launch >= self.settings.page_slot_recycle_after_pages:
            reason = f"{browser.pages_since_launch} pages served"
        else:
            rss = browser.rss_mb()
            if rss > self.settings.page_slot_recycle_rss_mb:
                reason = f"browser RSS {rss:.0f} MB over {self.settings.page_slot_recycle_rss_mb:g} MB"
        if reason:
            log.info("slot %s: recycling its browser (%s)", self.slot_id, reason)
            self.report.recycles += 1
            await browser.close_browser()
            await browser.ensure_page(None)

    def _transition(self, target: SlotState, reason: str = "", fields: dict[str, str | int] | None = None) -> str:
        try:
            result = self.registry.transition(self.slot_id, target, self.owner, reason=reason, fields=fields)
        except SlotTransitionRefused as refused:
            raise SlotEnded(f"slot record refused {refused.state} -> {target}: {refused.status}") from None
        except redis.RedisError as error:
            raise SlotEnded(f"Redis unavailable during {target}: {error}") from None
        self.state = target
        return result.outcome


def host_slot(slot_id: str, runner: Any, host: str | None = None) -> dict[str, Any]:
    """The body of the ``harvester.host_page_slot`` Celery task; ``runner`` settles the rendered pages."""
    reap_orphan_browsers()
    return PageSlotHost(slot_id, host=host, runner=runner).run().as_dict()
