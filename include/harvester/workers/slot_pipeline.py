"""The worker's side of a page slot: :class:`harvester.pageslots.pipeline.SlotPipeline` over the process's
:class:`~harvester.workers.batch.BatchRunner` (its sources, its rate-limit store, its settle path).

Every request a browser page sends to its own site takes the source's ``per_minute`` token (``acquire_fetch``,
the window HTTP fetches take theirs from) and the host's turn when the source limits its hosts or its blocks
slowed the host (``host_fetch``, as the HTTP fetcher asks it), right before it leaves: the page's route asks for
the navigation (every attempt) and for each XHR, fetch or document after it. The host's window is widened by
``rate_window_margin_seconds`` as per_minute's is. So both limits hold as the site sees them, whatever renders
the pages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from harvester.config import SourceConfig
from harvester.distributor import RateLimitStore, TaskMessage
from harvester.errors import StorageError
from harvester.scraping import FetchResult, HostLimits, HostRateTimeout
from harvester.workers.batch import BatchRunner
from harvester.workers.host_rate import HostRateGate
from harvester.workers.report import BatchReport

log = logging.getLogger(__name__)
OUTAGE_PAUSE_SECONDS = 0.5  # no token while Redis does not answer: look again after this
LONGEST_PAUSE_SECONDS = 1.0  # longest sleep between two looks at a full window


class SiteRequestCharger:
    """Tokens for one source's browser requests (see the module docstring); waits on the caller's loop."""

    def __init__(self, store: RateLimitStore, gate: HostRateGate, source: SourceConfig) -> None:
        self.store, self.gate, self.source = store, gate, source
        self.limits = HostLimits(per_minute=source.rate_limit.per_host_per_minute or 0)
        self.charged = 0

    async def charge(self, url: str) -> None:
        await self._per_minute()
        await self._host_turn(url)  # also when the source sets no host limit: a host its blocks slowed holds
        self.charged += 1

    async def _per_minute(self) -> None:
        while True:
            try:
                wait = await asyncio.to_thread(self.store.acquire_fetch, self.source.name)
            except StorageError as error:  # Redis restarting: no token, no request; look again shortly
                log.warning("rate token of %s unavailable: %s", self.source.name, error)
                wait = OUTAGE_PAUSE_SECONDS
            if wait <= 0:
                return
            await asyncio.sleep(min(wait, LONGEST_PAUSE_SECONDS))

    async def _host_turn(self, url: str) -> None:
        while True:
            try:
                token = await self.gate.acquire(self.source.name, url, self.limits)
            except HostRateTimeout:  # a page's request waits as long as its page lets it (its timeouts)
                await asyncio.sleep(LONGEST_PAUSE_SECONDS)
                continue
            except StorageError as error:  # Redis restarting: wait a little, then ask for the host's token again
                log.warning("host rate of %s unavailable: %s", self.source.name, error)
                await asyncio.sleep(OUTAGE_PAUSE_SECONDS)
                continue
            await self.gate.release(token)  # a start per request: in-flight limits are the slot's one page
            return


class WorkerSlotPipeline:
    """What a slot host's pool process gives its slots (``harvester.host_page_slot``)."""

    def __init__(self, runner: BatchRunner) -> None:
        self.runner = runner
        # the host's window widened by the rate margin, as for HTTP fetches (a browser request reaches the site
        # a little after its token: its route hands it to Chromium, which sends it)
        self.gate = HostRateGate.from_settings(runner.settings, runner.redis)

    def source(self, name: str) -> SourceConfig:
        return self.runner.sources.get(name)

    def hand_back(self, message: TaskMessage, reason: str) -> None:
        report = BatchReport(source=message.source, tasks=1)
        self.runner.failures.retry(message, reason, None, report, counter="config_error")
        self.runner.count(message.source, report)

    def charger(self, source: SourceConfig) -> SiteRequestCharger:
        return SiteRequestCharger(self.runner.store, self.gate, source)

    def settle(self, source: SourceConfig, message: TaskMessage, fetch: FetchResult,
               outcomes: Mapping[str, int]) -> BatchReport:
        return self.runner.finish(source, [message], [fetch], outcomes)
