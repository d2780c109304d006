"""One page slot hosted in one OS process (DESIGN.md section 5): the ``harvester.host_page_slot`` task.

A slot host is a Celery worker on the ``pageslots`` queue; each of its pool processes hosts at most one
slot at a time. :func:`host_slot` claims the slot record (refused if another process owns it: a slot
never runs twice), opens the one slot browser (:class:`harvester.scraping.SlotBrowser`: Chromium behind its
address guard, through its country's proxy) and serves that country's admitted browser tasks from the Redis
list the distributor fills, one at a time, handing each rendered page to the worker's pipeline through the
typed :class:`~harvester.pageslots.pipeline.SlotPipeline` (rate tokens for every request of the page, then the
settle path HTTP pages take). A thread heartbeats the slot record and the running task's lease, and brings the
allocator's orders (close, delete, move) back to the loop.

Failure rules (the slot browser's one rule; this host moves the record as it goes): a failed load, or a page
never ready, re-opens the page and loads again (RUNNING_SCRAPING_TASK -> PREPARING_PAGE); every
``page_slot_relaunch_after_failures`` (4) consecutive failures the browser is re-launched; at
``page_slot_give_up_after_failures`` (7) the task is given up and the slot goes back to NO_PAGE; a blocked task
(403, 451 or a block marker) closes the page (CLOSING_PAGE -> NO_PAGE). The browser is recycled after
``page_slot_recycle_after_pages`` pages or when its process tree's RSS passes ``page_slot_recycle_rss_mb``.
A failed or rejected page keeps a snapshot (HTML and screenshot) its dead letter links to. Whatever stops the
process, its Chromium is killed: on exit by its process tree, else by the host's orphan reaper.
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
from dataclasses import dataclass, field
from typing import Any

from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import HarvesterError, SlotEnded, StorageError, redis_storage_errors
from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.pageslots.browser_host import BrowserHost, BrowserPageFetcher, render_seconds
from harvester.pageslots.heartbeat import SlotHeartbeat, reap_orphan_browsers
from harvester.pageslots.pipeline import SlotPipeline
from harvester.pageslots.proxies import ProxyNotConfigured, require_proxy
from harvester.pageslots.proxy_pool import HealthTrackedPool, ProxyHealth, proxy_pool
from harvester.pageslots.registry import KEYS, SlotRegistry, SlotState, SlotTransitionRefused
from harvester.redis_keys import SourceKeys
from harvester.scraping import OWNER_FLAG, SLOT_FLAG, Render, SlotBrowser
from harvester.settings import HarvesterSettings, get_settings

__all__ = ["OWNER_FLAG", "SLOT_FLAG", "BrowserHost", "BrowserPageFetcher", "PageSlotHost", "SlotBrowser",
           "SlotState", "host_slot", "reap_orphan_browsers"]

log = logging.getLogger("harvester.pageslots.host")


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
    snapshots: int = 0
    blocked_requests: Counter[str] = field(default_factory=Counter)
    transferred_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "blocked_requests"},
                "blocked_requests": dict(self.blocked_requests)}


class PageSlotHost:
    """Hosts one slot until it lands in NO_PAGE (or is taken away). ``PageSlotHost(slot_id, pipeline=...).run()``.
    It is the slot browser's :class:`~harvester.scraping.LoadListener`: each failed load moves the record."""

    def __init__(self, slot_id: str, settings: HarvesterSettings, worker: str | None = None,
                 pipeline: SlotPipeline | None = None) -> None:
        self.slot_id = slot_id
        self.settings = settings
        self.worker = worker or socket.gethostname()  # the slot host's Celery node name, kept in the slot record
        self.owner = f"{self.worker}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        from harvester.connections import redis_client

        self.redis = redis_client(settings=self.settings)
        self.blocking = redis_client(settings=self.settings, blocking_seconds=self.settings.page_slot_task_wait_seconds)
        self.registry = SlotRegistry(self.redis)
        self.book = BrowserTaskBook(self.redis, self.settings.allocation_sample_size)
        self.report = SlotReport(slot_id)
        self.country = ""
        self.state = SlotState.PREPARING_PAGE
        self.last_used = time.monotonic()
        self.stopping = threading.Event()
        self._pipeline = pipeline
        self.browser = SlotBrowser(slot_id, None, self.settings)  # its proxy is the country's, once known
        self.heartbeat = SlotHeartbeat(self.redis, self.settings, slot_id, self.owner, lambda: self.browser.pid)
        self._snapshots: Any = None  # the SnapshotStore, opened on the first page that needs one
        self.gave_up_reason = ""

    @property
    def pipeline(self) -> SlotPipeline:
        """The worker's pipeline (rate tokens, settle path), given by the worker that hosts the slot."""
        if self._pipeline is None:
            raise RuntimeError("a slot host needs the worker's pipeline (pipeline=...)")
        return self._pipeline

    # -- life cycle ---------------------------------------------------------------------------------
    def run(self) -> SlotReport:
        status = self.registry.claim(self.slot_id, self.owner, self.worker, os.getpid(),
                                     2 * self.settings.page_slot_heartbeat_seconds)
        if status != "ok":
            self.report.outcome = f"not claimed: {status}"
            log.info("slot %s not hosted here: %s", self.slot_id, status)
            return self.report
        reap_orphan_browsers()  # after the claim, not before: a slot not claimed within two heartbeats is reset
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
            self.browser.proxy = require_proxy(self.country, self.settings.page_slot_allow_direct_connections)
            self.browser.country = self.country
            pool = proxy_pool(self.country)
            if pool:  # the country's pool, its health shared with every worker: a dead proxy is passed over
                self.browser.proxy_pool = HealthTrackedPool(self.country, pool, ProxyHealth(self.redis))
        except ProxyNotConfigured as error:
            self._transition(SlotState.NO_PAGE, reason=str(error))
            self.report.outcome = str(error)
            return
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
            except (SlotTransitionRefused, StorageError):  # refused or Redis gone: the record is reset by the reaper
                return

    async def _prepare(self) -> None:
        """PREPARING_PAGE: launch the browser through the proxy and open the page, by the failure rules."""
        self._check_stop()
        if not await self.browser.prepare(listener=self):
            raise SlotEnded(f"gave up after {self.settings.page_slot_give_up_after_failures} consecutive failed "
                            f"loads: {self.gave_up_reason}")
        self._transition(SlotState.PAGE_READY, fields={"consecutive_failures": 0})
        self.last_used = time.monotonic()  # idle from ready, not from the launch (a slow one is not idleness)

    # -- the failure rule's steps (LoadListener) ------------------------------------------------------
    def failed_load(self, failures: int, reason: str) -> None:
        self.report.failed_loads += 1
        if failures % self.settings.page_slot_relaunch_after_failures == 0:
            self.report.relaunches += 1
        self._check_stop()
        self._transition(SlotState.PREPARING_PAGE, reason=reason, fields={"consecutive_failures": failures})

    def gave_up(self, failures: int, reason: str) -> None:
        self.report.failed_loads += 1
        self.report.gave_up += 1
        self.gave_up_reason = reason
        self._transition(SlotState.NO_PAGE, reason=f"{reason} (gave up after {failures} consecutive failed loads)")

    def _check_stop(self) -> None:
        if self.stopping.is_set():
            raise SlotEnded("the slot host is stopping")
        if self.heartbeat.lost:
            raise SlotEnded("the slot record was reset or taken over")

    async def _close(self, reason: str) -> None:
        """PAGE_READY/RUNNING -> CLOSING_PAGE -> close the browser -> NO_PAGE (deleted or moved by orders)."""
        if self.state != SlotState.CLOSING_PAGE:
            self._transition(SlotState.CLOSING_PAGE, reason=reason)
        await self.browser.close_browser()
        outcome = self._transition(SlotState.NO_PAGE, reason=reason)
        raise SlotEnded(f"{reason} ({outcome})")

    # -- one task -----------------------------------------------------------------------------------
    async def _serve_one(self) -> None:
        if self.stopping.is_set():
            if self.state in (SlotState.PAGE_READY, SlotState.CLOSING_PAGE):
                await self._close("the slot host is stopping")
            raise SlotEnded("the slot host is stopping")
        self._check_stop()
        await self._obey_orders()
        await self._recycle_if_due()
        raw = await asyncio.to_thread(self._pop_task)
        if raw is None:
            return
        message = TaskMessage.model_validate_json(raw)
        member = task_member(message.source, message.task_id)
        status = self.registry.begin_task(self.slot_id, self.owner, self.country, raw, member)
        if status != "ok":
            fresh = self.heartbeat.beat()  # learn why: orders, reset
            if fresh is not None and fresh.state == SlotState.CLOSING_PAGE:
                self.state = SlotState.CLOSING_PAGE
            return
        self.state = SlotState.RUNNING_SCRAPING_TASK
        self.last_used = time.monotonic()
        await self._run_task(message, member)

    async def _obey_orders(self) -> None:
        """The allocator's orders (idle closing, delete, move) and our own idle time close the page."""
        orders = self.heartbeat.orders
        if orders is not None and orders.state == SlotState.CLOSING_PAGE:
            self.state = SlotState.CLOSING_PAGE  # idle closing by the page_slots DAG
            await self._close("closed by close_idle_page_slots")
        if orders is not None and orders.leaving:
            await self._close("deleted by the allocator" if orders.retire else f"moving to {orders.next_country}")
        if time.monotonic() - self.last_used >= self.settings.page_slot_idle_seconds:
            await self._close(f"idle for {self.settings.page_slot_idle_seconds:g}s")

    def _pop_task(self) -> str | None:
        try:
            with redis_storage_errors():
                popped = self.blocking.blpop([KEYS.browser_tasks(self.country)],
                                             timeout=self.settings.page_slot_task_wait_seconds)
        except StorageError as error:  # Redis restarting: wait a little, the loop tries again
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
            # outside admission, whatever Celery redelivers
            self._transition(SlotState.PAGE_READY)
            return
        held = (message.source, message.task_id, token)
        self.heartbeat.hold(held, 2 * self.settings.lease_seconds)  # while its source is read
        try:
            try:
                source = self.pipeline.source(message.source)
            except HarvesterError as error:  # its registration unreadable: hand the task back, keep the page
                await asyncio.to_thread(self.pipeline.hand_back, message,
                                        f"source config {message.source!r} could not be loaded: {error}")
                self.book.completed([member])
                self._transition(SlotState.PAGE_READY)
                return
            # rendering, then extracting and storing (two leases), as a batch's heartbeat deadline counts them
            self.heartbeat.hold(held, render_seconds(self.settings, source) + 2 * self.settings.lease_seconds)
            render = await self._render(message, source)
            failed = render.capture is not None or not render.fetch.ok
            if failed:  # kept before the settle path dead-letters it: a letter never waits for its snapshot
                await self._keep_evidence(source, message, render)
            settled = await asyncio.to_thread(self.pipeline.settle, source, message, render.fetch, render.outcomes)
            self.book.completed([member])
            self._count_site(source, message, render)
            if not failed and (settled.retried or settled.dead):  # a loaded page the settle path rejected
                await self._keep_evidence(source, message, render)
        finally:
            self.heartbeat.let_go()
            self.last_used = time.monotonic()
        await self._end_task(render)

    async def _render(self, message: TaskMessage, source: SourceConfig) -> Render:
        """The task's page by the failure rules; each request it sends its site takes its tokens as it leaves
        (per_minute and the host's turn, the navigation's too: every attempt is a request the site sees)."""
        render = await self.browser.render(message.url, source, message.kind, self.pipeline.charger(source),
                                           listener=self)
        self.report.tasks += 1
        if render.ending != "gave_up":
            self.report.pages += 1
            if self.state == SlotState.PREPARING_PAGE:
                self._transition(SlotState.PAGE_READY, fields={"consecutive_failures": 0, "pages_served": "+1"})
        if render.fetch.outcome == "blocked":
            render.outcomes["browser_blocked_closes"] += 1
        self.report.blocked_requests.update({name.split(":", 1)[1]: amount for name, amount in render.outcomes.items()
                                             if name.startswith("browser_blocked:")})
        self.report.transferred_bytes += render.transferred_bytes
        return render

    async def _end_task(self, render: Render) -> None:
        """After a task: a blocked page closes the slot, a give-up ends it, else the page is ready again."""
        if render.ending == "blocked":
            self.report.blocked_closes += 1
            await self._close(f"blocked: {render.fetch.reason}")
        if render.ending == "gave_up":
            raise SlotEnded(f"gave up after {self.settings.page_slot_give_up_after_failures} consecutive failed "
                            f"loads: {render.fetch.reason}")
        if self.state == SlotState.RUNNING_SCRAPING_TASK:
            self._transition(SlotState.PAGE_READY, fields={"pages_served": "+1", "consecutive_failures": 0})
        else:
            self.registry.redis.hincrby(KEYS.slot(self.slot_id), "pages_served", 1)

    def _count_site(self, source: SourceConfig, message: TaskMessage, render: Render) -> None:
        """Bytes through the country's proxy (per country and per source) and the run's site requests."""
        amount = render.transferred_bytes
        pipeline = self.redis.pipeline(transaction=False)
        if amount:
            pipeline.hincrby(KEYS.proxy_bytes, f"country:{self.country}", amount)
            pipeline.hincrby(KEYS.proxy_bytes, f"source:{source.name}", amount)
        if message.run_id is not None:
            run_requests = SourceKeys(source.name).run_site_requests
            pipeline.hincrby(run_requests, f"{message.run_id}|pages", 1)
            pipeline.hincrby(run_requests, f"{message.run_id}|sub_requests",
                             render.outcomes.get("browser_sub_requests", 0))
        try:
            with redis_storage_errors():
                pipeline.execute()
        except StorageError as error:  # counts only: the task is settled
            log.warning("slot %s: counting bytes and requests failed: %s", self.slot_id, error)

    async def _keep_evidence(self, source: SourceConfig, message: TaskMessage, render: Render) -> None:
        """A page that failed, or that did not end stored or followed (retried, rejected), keeps a snapshot for
        its dead letter: the page as the rule gave up on it, else as it is now (still open)."""
        capture = render.capture or await self.browser.capture()
        if capture is None:
            return
        reason = render.fetch.reason or render.fetch.counter
        try:
            if self._snapshots is None:
                from harvester.storage import SnapshotStore

                self._snapshots = SnapshotStore.from_settings(self.settings)
            kept = await asyncio.to_thread(self._snapshots.save, source.name, message.task_id,
                                           capture.url or message.url, reason, capture.html, capture.screenshot,
                                           None, message.run_id)
            if kept is None:  # over the run's or the source's evidence caps
                log.info("slot %s: the snapshot of %s was not kept (evidence caps)", self.slot_id, message.url)
            else:
                self.report.snapshots += 1
        except Exception as error:  # evidence only: MongoDB away must not stop the slot
            log.warning("slot %s: keeping the snapshot of %s failed: %s", self.slot_id, message.url, error)

    async def _recycle_if_due(self) -> None:
        browser = self.browser
        if browser.browser is None:
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
            with contextlib.suppress(Exception):  # a browser that does not come back is the next load's failure
                await browser.ensure_page(None)

    def _transition(self, target: SlotState, reason: str = "", fields: dict[str, str | int] | None = None) -> str:
        try:
            result = self.registry.transition(self.slot_id, target, self.owner, reason=reason, fields=fields)
        except SlotTransitionRefused as refused:
            raise SlotEnded(f"slot record refused {refused.state} -> {target}: {refused.status}") from None
        except StorageError as error:
            raise SlotEnded(f"Redis unavailable during {target}: {error}") from None
        self.state = target
        return result.outcome


def host_slot(slot_id: str, pipeline: SlotPipeline, worker: str | None = None) -> dict[str, Any]:
    """The body of the ``harvester.host_page_slot`` Celery task (an entry point: it reads the settings);
    ``pipeline`` takes tokens and settles pages, ``worker`` is the Celery node name of this slot host."""
    return PageSlotHost(slot_id, get_settings(), worker=worker, pipeline=pipeline).run().as_dict()
