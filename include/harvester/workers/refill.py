"""A batch that does not wait on its stragglers: it settles each page as it ends and takes on more work meanwhile.

A batch's pages end at their own pace; one host answering after 10 s, or a connect timeout, would otherwise hold
every lease of the batch (the source's ``max_active`` places) and the Celery process for that long. So an HTTP
batch whose pages are not all done after ``batch_settle_interval_seconds`` settles the pages that ended (the same
path as a whole batch: archive, extract, store, follow, count down, release) while the others stay in flight, and
fills the room they left, wave after wave:

- first with tasks of its source the distributor admitted and published whose message still waits for a worker
  process (``RateLimitStore.take_queued``, ``distributor/lua/take_queued.lua``): admission already counted them;
  they are started under fresh tokens and their message, when it runs, drops them;
- then from intake, under admission's own checks (``RateLimitStore.admit``: host-fair, ``max_active``,
  ``per_minute``, ``per_host_max_active``, pauses), started at once (``RateLimitStore.start``). A worker killed
  between the two calls leaves reservations that return to intake uncharged after ``publish_grace_seconds``.

It keeps at most as many young pages in flight as a published batch holds (``publish_batch_size``, or the batch's
own size when larger), and its slow pages beside them (at most as many again): a message whose tasks other
batches took over while it waited is as wide as a full one. It takes on work for :data:`REFILL_BUDGET_LEASES`
leases from its start, then lets its last pages end and settles them. A batch whose pages all end within the
interval ends as before, in one settle. The :class:`LeaseHeartbeat` and the :class:`RateTokenPermit` cover the tasks
taken on and drop those settled. A page of a source with ``per_host_max_active`` still in flight after
``slow_request_lend_seconds`` lends its source's place back (harvester.distributor.lending); past its refill time a
batch left with only such pages hands their tasks back to intake rather than wait out their timeouts. A worker
killed mid-refill loses nothing: the batch's own tasks come back through ``worker_lost``, those it took on when
their leases expire (the reaper), and a taken-over task's old message meets a token that no longer holds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Protocol

from harvester.config import SourceConfig
from harvester.distributor import PlaceLending, TaskMessage
from harvester.errors import StorageError
from harvester.scraping import Fetcher, FetchResult
from harvester.workers.heartbeat import LeaseHeartbeat, RateTokenPermit
from harvester.workers.incremental import BatchFetcher
from harvester.workers.lost import BatchHoldings
from harvester.workers.report import BatchReport

if TYPE_CHECKING:
    from harvester.distributor import RateLimitStore, RegisteredSources
    from harvester.scraping import PageFetcher, PageResult
    from harvester.settings import HarvesterSettings
    from harvester.workers.incremental import IncrementalFetching

log = logging.getLogger(__name__)
# A batch takes on more tasks for at most this many leases of time from its start (as a chain is followed), then
# lets its pages end: it stays far inside Celery's time limit and its process goes back to the queue.
REFILL_BUDGET_LEASES = 0.5
# Each batch's budget is that less a random share up to this: batches started together (a run's first messages, one
# per worker process) would end together, and every process would then drain the queue's stale messages at once.
REFILL_BUDGET_JITTER = 0.25
# Slow pages kept in flight beside the young ones, as a multiple of the batch's first size.
STRAGGLERS_PER_PAGE = 1


class BatchRunner(Protocol):
    """What a refilling round uses of :class:`harvester.workers.batch.BatchRunner`: the process's clients, loop and
    fetchers, and the one settle path every batch takes."""

    settings: HarvesterSettings
    loop: asyncio.AbstractEventLoop
    fetcher: PageFetcher
    sources: RegisteredSources
    incremental: IncrementalFetching

    @property
    def store(self) -> RateLimitStore: ...

    def fetcher_for(self, source: SourceConfig) -> PageFetcher: ...

    def batch_deadline(self, source: SourceConfig, pages: int = 1, fetcher: PageFetcher | None = None) -> float: ...

    def archived(self, source: SourceConfig, messages: list[TaskMessage], fetches: list[FetchResult],
                 report: BatchReport) -> bool: ...

    def process(self, source: SourceConfig, messages: list[TaskMessage],
                fetches: list[FetchResult]) -> list[PageResult]: ...

    def settle(self, source: SourceConfig, messages: list[TaskMessage], pages: list[PageResult],
               report: BatchReport, chain_until: float | None = None) -> list[TaskMessage]: ...

    def count(self, source: str, report: BatchReport, messages: list[TaskMessage] | None = None,
              fetches: list[FetchResult] | None = None) -> None: ...


def refills(runner: BatchRunner, source: SourceConfig, messages: list[TaskMessage]) -> bool:
    """Whether a batch of ``source`` settles and refills as its pages end: HTTP sources (page by page on the
    worker's loop) with a settle interval; a browser batch renders one page after the other in its slot. A task that
    must run alone (``TaskMessage.run_alone``: its last batch died beside it) takes nothing on beside it."""
    return (runner.settings.batch_settle_interval_seconds > 0 and source.render == "http"
            and isinstance(runner.fetcher, Fetcher) and runner.fetcher_for(source) is runner.fetcher
            and not any(message.run_alone for message in messages))


def refill_budget_seconds(lease_seconds: float) -> float:
    """How long a batch takes on work: ``REFILL_BUDGET_LEASES`` leases less a random share up to
    ``REFILL_BUDGET_JITTER``."""
    return REFILL_BUDGET_LEASES * lease_seconds * (1 - REFILL_BUDGET_JITTER * random.random())


class RefillingRound:
    """One round of a batch run page by page: its fetches in flight, its waves settled as they end."""

    def __init__(self, runner: BatchRunner, source: SourceConfig, report: BatchReport,
                 chain_until: float | None) -> None:
        self.runner, self.source, self.report, self.chain_until = runner, source, report, chain_until
        self.name = source.name
        assert isinstance(runner.fetcher, Fetcher), "only an HTTP batch refills (refills())"
        self.http: Fetcher = runner.fetcher
        self.interval = runner.settings.batch_settle_interval_seconds
        # A chain's next request waits for its page's settle: settled as each ends, the chains of a batch go at their
        # own pace, not in lockstep with the slowest page of the wave (detail pages settle together, in one write).
        self.return_when = asyncio.FIRST_COMPLETED if source.follows_chains else asyncio.ALL_COMPLETED
        self.budget_seconds = refill_budget_seconds(runner.settings.lease_seconds)
        self.in_flight: dict[asyncio.Task[FetchResult], tuple[TaskMessage, float]] = {}  # -> (task, started at)
        self.outcomes: Counter[str] = Counter()  # the fetching's own counters, until the next wave takes them
        self.waves = 0
        self.width = 0
        self.lend_after = runner.settings.slow_request_lend_seconds
        self.lending = PlaceLending(runner.store.scripts)
        self.lent: set[str] = set()  # tasks in flight whose source place is lent: they are not counted as its room
        self.next_lending = 0.0  # monotonic time of the next offer to lend (at most one a second once refused)

    def run(self, messages: list[TaskMessage]) -> list[TaskMessage]:
        """Fetch ``messages`` (started, held), settle and refill in waves until every page ended and was settled.
        Chains' next requests it holds join the pages in flight, so nothing is left for another round."""
        runner = self.runner
        # A message's tasks may have been taken over by other batches' refills while it waited for a process: it
        # then starts with one or two. It still has the room of a whole published batch, else a broad source's
        # batches go narrow and most of its max_active places wait, published, in messages no process runs.
        self.width = max(len(messages), runner.settings.publish_batch_size)
        refill_until = time.monotonic() + self.budget_seconds
        deadline = runner.batch_deadline(self.source, len(messages)) + self.budget_seconds
        leases = {message.task_id: str(message.lease_token) for message in messages}
        self.holdings = BatchHoldings(runner.store.redis, self.name, [message.task_id for message in messages],
                                      deadline + runner.settings.lease_seconds)
        with LeaseHeartbeat(runner.store, self.name, leases, runner.settings.heartbeat_seconds,
                            deadline) as heartbeat:
            self.heartbeat = heartbeat
            self.permit = RateTokenPermit(runner.store, self.name, [], heartbeat)
            self.launch(messages)
            try:
                while self.in_flight:
                    ended = self.wait()
                    everything_ended = not self.in_flight
                    if ended:
                        chained = self.settle(ended)  # a chain's next requests this batch now holds
                        self.report.tasks += len(chained)
                        self.launch(chained, vouched=False)
                    if self.in_flight and not everything_ended:
                        self.lend_slow_places()
                        if time.monotonic() < refill_until:
                            self.refill()
                        else:
                            self.hand_back_slow_pages()
            finally:
                self.cancel_in_flight()
                self.forget_holdings()
        return []

    # -- fetching ----------------------------------------------------------------------------------
    def launch(self, messages: list[TaskMessage], vouched: bool = True) -> None:
        """Start fetching ``messages`` (held under their tokens) beside the pages in flight; ``vouched``: the
        heartbeat covers them already (else they are added: tasks taken on, a chain's next requests)."""
        if not messages:
            return
        runner, loop = self.runner, self.runner.loop
        if not vouched:
            taken_on = {message.task_id: str(message.lease_token) for message in messages}
            self.heartbeat.add(taken_on)
            self.record_holdings(taken_on)
        first = len(self.permit.task_ids)
        self.permit.task_ids.extend(message.task_id for message in messages)
        fetcher = runner.incremental.fetcher(self.source, messages, self.http, runner.sources.version(self.name))
        now = time.monotonic()
        for offset, message in enumerate(messages):
            ready = functools.partial(self.permit, first + offset)
            if isinstance(fetcher, BatchFetcher):
                page = fetcher.fetch_page(offset, message.url, self.source, ready, self.outcomes)
            else:  # the HTTP fetcher itself: nothing incremental in this group
                page = self.http.fetch(message.url, self.source, ready)
            self.in_flight[loop.create_task(page, name=f"fetch-{message.task_id}")] = (message, now)

    def record_holdings(self, taken_on: dict[str, str]) -> None:
        """Name the tasks taken on under the batch's own (harvester.workers.lost.BatchHoldings): if the process dies,
        their kills count as its own tasks' do. Redis failing leaves them to the reaper (attempt + 1), as before."""
        try:
            self.holdings.add(taken_on)
        except StorageError as error:
            log.warning("%s: the tasks taken on could not be recorded for a lost batch: %s", self.name, error)

    def forget_holdings(self) -> None:
        try:
            self.holdings.clear()
        except StorageError as error:  # the key expires
            log.warning("%s: the batch's record of tasks taken on stays until it expires: %s", self.name, error)

    def wait(self) -> list[tuple[TaskMessage, FetchResult]]:
        """Run the loop until every page in flight ended (a chain's: one page) or the settle interval passed; the
        pages that ended.
        What a fetch raises (the worker's own stores, never a site) fails the batch, as a whole batch would."""
        done, _ = self.runner.loop.run_until_complete(asyncio.wait(set(self.in_flight), timeout=self.interval,
                                                                   return_when=self.return_when))
        ended = []
        for task in done:
            message, _ = self.in_flight.pop(task)
            self.lent.discard(message.task_id)
            ended.append((message, task.result()))
        return ended

    def cancel_in_flight(self) -> None:
        """A batch that failed half way: its pages still in flight are cancelled (their leases expire)."""
        if not self.in_flight:
            return
        for task in self.in_flight:
            task.cancel()
        self.runner.loop.run_until_complete(asyncio.gather(*self.in_flight, return_exceptions=True))
        self.in_flight.clear()

    # -- settling ----------------------------------------------------------------------------------
    def settle(self, ended: list[tuple[TaskMessage, FetchResult]]) -> list[TaskMessage]:
        """Settle the pages that ended exactly as a whole batch is settled; the heartbeat stops vouching for them.
        The first wave counts into the batch's report (what its start counted goes with it), later ones apart."""
        runner = self.runner
        messages = [message for message, _ in ended]
        results = [result for _, result in ended]
        wave = self.report if self.waves == 0 else BatchReport(source=self.name)
        self.waves += 1
        wave.outcomes.update(self.outcomes)
        self.outcomes.clear()
        wave.outcomes.update(self.http.robots.take_outcomes())  # robots.txt rules bounded away, files unavailable
        waited = self.permit.waited_seconds
        if waited >= 0.001:
            wave.outcomes["rate_wait_ms"] += int(waited * 1000)
            self.permit.waited_seconds = 0.0
        chained: list[TaskMessage] = []
        if runner.archived(self.source, messages, results, wave):
            pages = runner.process(self.source, messages, results)
            chained = runner.settle(self.source, messages, pages, wave, self.chain_until)
        runner.count(self.name, wave, messages, results)
        self.heartbeat.drop(message.task_id for message in messages)
        if wave is not self.report:
            self.report.merge(wave)
        return chained

    # -- refilling ---------------------------------------------------------------------------------
    def refill(self) -> None:
        """Take on as many tasks as the batch has room for: queued ones of its source first, then from intake
        under admission's checks. Redis failing only stops this wave's refill (the pages in flight go on)."""
        now = time.monotonic()
        young = sum(now - started < self.interval for _, started in self.in_flight.values())
        room = min(self.width - young, self.width * (1 + STRAGGLERS_PER_PAGE) - len(self.in_flight) + len(self.lent))
        if room <= 0:
            return
        taken: list[TaskMessage] = []
        try:
            taken = self.runner.store.take_queued(self.name, room)
            if len(taken) < room:
                taken += self.admit(room - len(taken))
        except StorageError as error:
            log.warning("%s: taking on more tasks failed: %s", self.name, error)
        if taken:
            self.report.tasks += len(taken)
            self.report.outcomes["refilled"] += len(taken)
            self.launch(taken, vouched=False)

    def lend_slow_places(self) -> None:
        """Pages in flight for ``slow_request_lend_seconds`` lend their source's place back (once each): admission
        and this batch's refill may start other tasks while they wait on their host (harvester.distributor.lending).
        A lent page no longer counts against the batch's stragglers. A page refused (twice ``max_active`` places lent
        already) is offered again a second later; a source without a per-host limit is not asked again. Redis
        failing lends nothing this wave."""
        now = time.monotonic()
        if self.lend_after <= 0 or now < self.next_lending:
            return
        slow = {message.task_id: str(message.lease_token) for message, started in self.in_flight.values()
                if now - started >= self.lend_after and message.task_id not in self.lent}
        if not slow:
            return
        try:
            lent = self.lending.lend(self.name, slow)
        except StorageError as error:
            log.warning("%s: lending the places of %d slow pages failed: %s", self.name, len(slow), error)
            return
        self.lent.update(lent.lent)
        if lent.lent:
            self.report.outcomes["places_lent"] += len(lent.lent)
        if not lent.lends:
            self.lend_after = 0.0  # the source lends nothing (no per-host limit): this batch stops asking
        elif len(lent.lent) < len(slow):
            self.next_lending = now + 1.0

    def hand_back_slow_pages(self) -> None:
        """Past its refill time, a batch left with only lent pages (slow hosts), each safe to send again, cancels
        them and hands their tasks back to intake with the same attempt, so its worker process goes back to the
        queue instead of waiting out their timeouts (harvester.distributor.lending). A page that ended meanwhile is
        settled first, at the next wave. Redis failing hands nothing back: the batch waits for its pages."""
        pages = list(self.in_flight.items())
        if not pages or any(task.done() or message.task_id not in self.lent
                            or (message.request is not None and not message.request.safe_to_repeat)
                            for task, (message, _) in pages):
            return
        leases = {message.task_id: str(message.lease_token) for _, (message, _) in pages}
        try:
            handed_back = self.lending.hand_back(self.name, leases)
        except StorageError as error:
            log.warning("%s: handing back %d slow pages failed: %s", self.name, len(leases), error)
            return
        self.cancel_in_flight()
        self.lent.clear()
        self.heartbeat.drop(leases)
        self.report.outcomes["handed_back"] += handed_back

    def admit(self, wanted: int) -> list[TaskMessage]:
        """Admit up to ``wanted`` tasks from intake as the distributor would, and start them for this batch."""
        store = self.runner.store
        admission = store.admit(self.name, wanted, beside_others=True)  # a task that must run alone is left
        if not admission.messages:
            return []
        admitted = {message.task_id: message  # a malformed one goes to dead letters, as the distributor's
                    for message in store.admitted_messages(self.name, admission.messages, admission.tokens)}
        held = store.start(self.name, {task_id: str(message.lease_token) for task_id, message in admitted.items()})
        return [admitted[task_id] for task_id in held.held]
