"""Lease heartbeats and the fetch permit: a batch vouches for the tasks it holds for as long as it runs,
and no longer, and sends a request only for a task it still holds, with a per_minute token in hand."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Mapping

from harvester.distributor import RateLimitStore
from harvester.errors import StorageError

log = logging.getLogger(__name__)

GATE_POLL_SECONDS = 1.0  # longest sleep between two looks at a full rate window
GATE_OUTAGE_SECONDS = 0.5  # wait between tries while Redis does not answer


class LeaseHeartbeat:
    """Extends the batch's leases every ``interval`` seconds from a thread, for as long as the batch runs
    (fetching AND storing: a slow bulk_write must not let the reaper hand the tasks to another worker).

    ``leases`` maps task id -> fencing token; only leases still held under that token are extended, and
    :attr:`held` is what the last beat found held (a task reaped meanwhile drops out: its new holder
    fetches it, this batch must not). Heartbeating a released task does nothing, so it may run until
    the very end."""

    def __init__(self, store: RateLimitStore, source: str, leases: Mapping[str, str], interval: float,
                 max_seconds: float | None = None) -> None:
        self.store, self.source, self.leases, self.interval = store, source, dict(leases), interval
        self.max_seconds = max_seconds
        self.held: set[str] = set(self.leases)
        self._lock = threading.Lock()  # a refilling batch adds and drops leases while the thread beats
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{source}", daemon=True)

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def add(self, leases: Mapping[str, str]) -> None:
        """Vouch for more tasks from now on (a refilling batch took them on: harvester.workers.refill)."""
        with self._lock:
            self.leases.update(leases)
            self.held |= set(leases)

    def drop(self, task_ids: Iterable[str]) -> None:
        """Stop vouching for tasks the batch settled (released, retried or dead-lettered), or whose lease the
        fetch permit found gone: their leases are no longer this batch's, a beat for them would only be
        counted stale (or revive an expired lease the batch gave up; a beat under way cannot add them back)."""
        with self._lock:
            for task_id in task_ids:
                self.leases.pop(task_id, None)
                self.held.discard(task_id)

    def _beat(self) -> None:
        """Beat until stopped, or until ``max_seconds``: a batch stuck past every timeout stops being
        vouched for, so its leases expire and the reaper gives the tasks to another worker; from then on
        it holds nothing, so none of its requests starts beside the new holder's."""
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        while not self._stop.wait(self.interval):
            if deadline is not None and time.monotonic() > deadline:
                log.warning("batch of %s still running after %.0fs: no more heartbeats, and no more requests",
                            self.source, self.max_seconds)
                with self._lock:
                    self.held = set()
                return
            with self._lock:
                asked = {task_id: self.leases[task_id] for task_id in self.held}
            try:
                held = set(self.store.heartbeat(self.source, asked))
            except StorageError as error:
                log.warning("heartbeat of %s failed: %s", self.source, error)
                continue
            lost = set(asked) - held
            if lost:
                log.warning("%s: %d leases of this batch were lost (reaped and handed on); their tasks are "
                            "not fetched or settled here", self.source, len(lost))
            with self._lock:  # tasks added meanwhile stay held, tasks dropped meanwhile stay dropped
                self.held = ((self.held - set(asked)) | held) & set(self.leases)


class RateTokenPermit:
    """Opens for one request of the batch: only while the task is still held, and only with one of the
    source's per_minute tokens (taken at fetch time across all workers, retries included, so the site
    never sees more than ``per_minute`` starts in a window).

    Requests that ask in the same event-loop turn (a batch's pages, gathered by the fetcher) are served by
    one round: ONE call takes up to that many tokens atomically (one thread hop, one Redis round trip
    instead of one each) and hands them out in the order asked. Those left without a token wait for the
    window to have room (at most ``GATE_POLL_SECONDS`` at a time, ``GATE_OUTAGE_SECONDS`` while Redis does
    not answer) and ask again together; before every round a task no longer held gets False and no token.
    """

    def __init__(self, store: RateLimitStore, source: str, task_ids: list[str], heartbeat: LeaseHeartbeat) -> None:
        self.store, self.source, self.task_ids, self.heartbeat = store, source, task_ids, heartbeat
        self.waited_seconds = 0.0  # summed over requests, as each request waited
        self.token_calls = 0  # rounds that asked Redis for tokens (one round trip each)
        self._waiting: list[tuple[str, asyncio.Future[bool]]] = []  # (task id, its answer), in order asked
        self._round: asyncio.Task[None] | None = None

    async def __call__(self, index: int) -> bool:
        task_id = self.task_ids[index]
        if task_id not in self.heartbeat.held:
            return False
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((task_id, answer))
        if self._round is None or self._round.done():
            # runs after every task of this loop turn had its step: all who ask now share its first call
            self._round = asyncio.create_task(self._serve(), name=f"rate-tokens-{self.source}")
        return await answer

    async def _serve(self) -> None:
        """Serve rounds until nobody waits; a failure that is not Redis's reaches every waiting request."""
        try:
            while self._drop_not_held():
                await self._serve_round()
        except asyncio.CancelledError:
            for _, answer in self._waiting:
                answer.cancel()
            self._waiting.clear()
            raise
        except Exception as error:  # handed to the requests, who await it (nobody awaits this task)
            for _, answer in self._waiting:
                if not answer.done():
                    answer.set_exception(error)
            self._waiting.clear()

    def _lost(self, task_ids: frozenset[str]) -> None:
        """The token call found these leases gone (reaped, or expired while Redis did not answer): the batch
        stops vouching for them and their requests get False (``skipped``, counted ``lease_lost``, never
        settled here: the new holder fetches and settles them)."""
        if not task_ids:
            return
        log.warning("%s: %d leases of this batch were lost before their requests started; not fetched here",
                    self.source, len(task_ids))
        self.heartbeat.drop(task_ids)

    def _drop_not_held(self) -> bool:
        """Answer False to the requests whose task is no longer held, forget cancelled ones; True if any wait."""
        still_waiting = []
        for task_id, answer in self._waiting:
            if answer.done():
                continue
            if task_id not in self.heartbeat.held:
                answer.set_result(False)
                continue
            still_waiting.append((task_id, answer))
        self._waiting = still_waiting
        return bool(still_waiting)

    async def _serve_round(self) -> None:
        """One call for every waiting request: the granted tokens go out in order, the rest sleep together."""
        try:
            self.token_calls += 1
            asked = list(self._waiting)
            leases = {task_id: self.heartbeat.leases.get(task_id, "") for task_id, _ in asked}
            tokens = await asyncio.to_thread(self.store.acquire_fetches, self.source, len(asked), None, leases)
            granted, wait = tokens.granted, tokens.wait_seconds
        except StorageError as error:  # Redis away: no token, no request; look again shortly
            log.warning("rate tokens of %s unavailable: %s", self.source, error)
            granted, wait = 0, GATE_OUTAGE_SECONDS
        else:
            self._lost(tokens.lost)
        # the granted tokens go to the asked requests still held, in order; requests that joined during the
        # call queue behind (they were not asked for); one cancelled meanwhile passes its token on
        for task_id, answer in asked:
            if not granted:
                break
            if not answer.done() and task_id in self.heartbeat.held:
                answer.set_result(True)
                granted -= 1
        if wait <= 0 or not self._drop_not_held():
            return
        pause = min(wait, GATE_POLL_SECONDS)
        self.waited_seconds += pause * len(self._waiting)
        await asyncio.sleep(pause)
