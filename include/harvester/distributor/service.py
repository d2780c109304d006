"""The distributor service (`harvester distributor`): intake -> admission -> Celery queues, fairly.

Each round: reap expired leases when due, read the registered sources, order them high priority
first (rotating the start inside each tier so no source is always last), admit a bounded batch per
source in ONE pipelined round trip, and publish each source's admitted tasks to its Celery queue in
messages of ``publish_batch_size`` tasks through one pipelined kombu producer batch. A source with a
million pending tasks gets the same batch per round as a source with ten, so it cannot starve it.

Backpressure: a queue already ``queue_max_depth`` Celery messages deep gets nothing this round.
When nothing more can be admitted (nothing was, or every source got less than it asked for: its
limit, an empty intake, a pause) the distributor blocks on the intake signal list (BLPOP) until new
intake, a released lease, or the earliest known wake-up time (rate window, Retry-After, retry due,
next reap), so it never polls while idle, nor runs a round it knows would admit nothing. Several
distributors may run: every admission is atomic.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError

from harvester.connections import blocking_twin
from harvester.distributor.known_sources import SOURCES_REFRESH_SECONDS, KnownSources
from harvester.distributor.lost_messages import LostMessageProbe
from harvester.distributor.publisher import SCRAPE_TASK, SOFT_LIMIT_MARGIN_SECONDS, CeleryPublisher, celery_app_for
from harvester.distributor.ready_work import LeasedSources, ReadyWork
from harvester.distributor.registry import RegisteredSource, SourceRegistry
from harvester.distributor.store import Admission, RateLimitStore, wake_distributors
from harvester.errors import DistributorError, ShutdownRequested, StorageUnavailableError
from harvester.redis_keys import INTAKE_SIGNAL, distributor_heartbeat
from harvester.redis_scripts import ScriptPipeline
from harvester.settings import HarvesterSettings

log = logging.getLogger("harvester.distributor")

__all__ = ["SCRAPE_TASK", "SOFT_LIMIT_MARGIN_SECONDS", "BrowserHandoff", "CeleryPublisher", "Distributor",
           "celery_app_for"]

SUMMARY_SECONDS = 60.0
MAX_WAIT_SECONDS = 30.0  # a blocking wait never outlasts the blocking connection's socket timeout
BACKPRESSURE_POLL_SECONDS = 0.2  # Celery gives no event when a queue drains: look again this often
HEARTBEAT_SECONDS = 5.0  # how often a working distributor refreshes its liveness key
HEARTBEAT_TTL_SECONDS = 600  # a stopped distributor's key goes away on its own
# What an outage looks like: the store's wrapped errors, redis-py's own from the direct reads, kombu's on publish.
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    StorageUnavailableError, redis.ConnectionError, redis.TimeoutError, KombuOperationalError,
)


class BrowserHandoff(Protocol):
    """Where admitted browser tasks go: the page slots of their task's country. The page slots implement it
    (``harvester.pageslots.handoff.PageSlotHandoff``) and whoever starts a distributor gives it one, so the
    distributor never imports the page slots (they import the distributor)."""

    def backlog_key(self, country: str) -> str:
        """The Redis list of the country's tasks waiting for a slot (its length is the backlog, in tasks)."""
        ...

    def hand_over(self, pipeline: ScriptPipeline, country: str, tasks: list[dict[str, Any]]) -> None:
        """Queue the hand-over of admitted tasks to ``country``'s slots on a pipeline the distributor sends."""
        ...


@dataclass
class RoundOutcome:
    admitted: int = 0
    published_messages: int = 0
    malformed: int = 0
    backpressured: bool = False
    wait_seconds: float | None = None  # the earliest known time admission may succeed again
    # every source asked got less than it asked for (its limit, an empty intake, a pause): another round
    # now would admit nothing, so the distributor waits for the event that changes that (a release, new
    # intake, a retry or window coming due) instead of running it
    saturated: bool = False


@dataclass
class DistributorTotals:
    rounds: int = 0
    admitted: int = 0
    published_messages: int = 0
    malformed: int = 0
    reaped: int = 0


class Distributor:
    """One distributor process. Safe to run several at once against the same Redis."""

    def __init__(
        self,
        redis_client: redis.Redis,
        settings: HarvesterSettings,
        app: Celery | None = None,
        blocking_client: redis.Redis | None = None,
        on_dead_letters: Callable[[str, list[str]], None] | None = None,
        name: str | None = None,
        browser_handoff: BrowserHandoff | None = None,
    ) -> None:
        self.name = name or socket.gethostname()
        self._heartbeat_at = float("-inf")
        self.settings = settings
        self.redis = redis_client
        self.blocking = blocking_client or blocking_twin(redis_client, MAX_WAIT_SECONDS)
        self.store = RateLimitStore(redis_client, self.settings)
        self.publisher = CeleryPublisher(app or celery_app_for(self.settings), self.settings.publish_batch_size,
                                         self.batch_time_limit, self.messages_for)
        self.on_dead_letters = on_dead_letters
        self.browser_handoff = browser_handoff  # None: browser sources wait for a distributor that has one
        self.registry = SourceRegistry(redis_client)
        self.known = KnownSources(redis_client, self.registry)
        self.ready_work = ReadyWork(redis_client, self.settings.publish_batch_size)
        self.leased = LeasedSources(redis_client)
        self.totals = DistributorTotals()
        self._stop = threading.Event()
        self._waiting = False
        self._round_number = 0
        self._next_reap = 0.0
        self.lost_messages = LostMessageProbe(redis_client, self.store.scripts, self.settings)
        self._unpublished: list[tuple[str | None, list[dict[str, Any]]]] = []  # (Celery queue or None: slots, tasks)
        self._undeliverable: set[str] = set()  # browser sources already warned about (no hand-off)
        self._outage_since: float | None = None
        self._clock_offset: float | None = None  # Redis TIME minus this machine's clock (s)

    # -- life cycle -------------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def handle_signal(self, signum: int, _frame: object) -> None:
        """SIGTERM/SIGINT: finish the current round (admitted work is published), then exit."""
        log.info("signal %s: stopping after the current round", signum)
        self.request_stop()
        if self._waiting:
            raise ShutdownRequested

    def run(self, max_seconds: float | None = None) -> DistributorTotals:
        """Distribute until stopped (or for ``max_seconds``). Redis outages are waited out, never fatal."""
        ends_at = None if max_seconds is None else time.monotonic() + max_seconds
        backoff = 0.1
        log.info("distributor started (redis %s)", self._redis_location())
        summary = (time.monotonic(), DistributorTotals())
        while not self.stopping and (ends_at is None or time.monotonic() < ends_at):
            try:
                self.heartbeat()
                outcome = self.run_round()
                self._back_online()
                backoff = 0.1
                summary = self._log_summary(*summary)
                if (outcome.admitted == 0 or outcome.saturated) and outcome.malformed == 0 and not self.stopping:
                    wait = self._wait_seconds(outcome)
                    if ends_at is not None:
                        wait = min(wait, max(0.0, ends_at - time.monotonic()))
                    self.wait_for_work(wait)
            except REDIS_ERRORS as error:
                self._outage(error)
                self._stop.wait(backoff)
                backoff = min(self.settings.redis_retry_max_seconds, backoff * 2)
            except ShutdownRequested:
                break
        self._flush_on_stop()
        log.info("distributor stopped: %s", self.totals)
        return self.totals

    def heartbeat(self) -> None:
        """Write the liveness key `harvester health distributor` reads, at most every HEARTBEAT_SECONDS.

        It is written before each round and a round's blocking wait lasts at most MAX_WAIT_SECONDS, so a
        key older than that (plus a round) means the loop is stuck or the process is gone.
        """
        if time.monotonic() - self._heartbeat_at < HEARTBEAT_SECONDS:
            return
        self.redis.set(distributor_heartbeat(self.name), f"{time.time():.3f}", ex=HEARTBEAT_TTL_SECONDS)
        self._heartbeat_at = time.monotonic()

    def _log_summary(self, since: float, before: DistributorTotals) -> tuple[float, DistributorTotals]:
        """One line a minute while work flows, so an operator sees the rate without a metrics stack."""
        if time.monotonic() - since < SUMMARY_SECONDS:
            return since, before
        now = DistributorTotals(**vars(self.totals))
        if now.admitted != before.admitted or now.reaped != before.reaped:
            log.info("last %.0fs: admitted %d tasks in %d Celery messages, reaped %d leases, %d malformed",
                     time.monotonic() - since, now.admitted - before.admitted,
                     now.published_messages - before.published_messages, now.reaped - before.reaped,
                     now.malformed - before.malformed)
        return time.monotonic(), now

    def _flush_on_stop(self) -> None:
        """Publish what was admitted but not yet sent; if Redis is down, the leases bring it back later."""
        if not self._unpublished:
            return
        try:
            self._publish_pending()
        except REDIS_ERRORS as error:
            log.warning("could not publish %d admitted batches at shutdown (%s); their leases will expire and "
                        "the tasks return to intake", len(self._unpublished), type(error).__name__)

    # -- one round --------------------------------------------------------------------------------
    def run_round(self) -> RoundOutcome:
        """Reap when due, admit a fair batch of every source, publish it. Raises on Redis errors."""
        self._round_number += 1
        self.totals.rounds += 1
        outcome = RoundOutcome()
        self._publish_pending()
        if time.monotonic() >= self._next_reap:
            self.reap()
        if self.lost_messages.due:
            self.return_lost_messages()
        sources = self._deliverable(self.known.current())
        if not sources:
            return outcome
        requests, waits = self._requests(list(sources.values()), outcome)
        if requests:
            self._admit_and_publish(requests, sources, outcome, waits)
        outcome.wait_seconds = min(waits) if waits else None
        return outcome

    def _requests(self, sources: list[RegisteredSource], outcome: RoundOutcome
                  ) -> tuple[list[tuple[str, int]], list[float]]:
        """(source, tasks wanted) of this round in fair order, within each destination's room; and the known
        wake-up waits. Only the sources with work are read and ordered (harvester.distributor.ready_work)."""
        destinations = {self.destination(source): source.browser for source in sources}  # -> holds tasks
        look = self.ready_work.look(sources, destinations, self.server_now())
        waits = list(look.retry_due_in.values())
        requests: list[tuple[str, int]] = []
        budget = {destination: (self.settings.queue_max_depth - depth) * self.settings.publish_batch_size
                  for destination, depth in look.depths.items()}
        ready = look.ready
        # a source with nothing to admit leaves the queue's room to the sources that have work
        for source in self.fair_order([s for s in sources if ready.get(s.name, 0) > 0], self._round_number):
            destination = self.destination(source)
            room = budget[destination]
            if room <= 0:
                outcome.backpressured = True
                continue
            wanted = min(self.settings.admit_batch_size, room, ready[source.name])
            budget[destination] -= wanted
            requests.append((source.name, wanted))
        return requests, waits

    def _admit_and_publish(self, requests: list[tuple[str, int]], sources: dict[str, RegisteredSource],
                           outcome: RoundOutcome, waits: list[float]) -> None:
        admissions = self.store.admit_many(requests)
        work: list[tuple[str | None, list[dict[str, Any]]]] = []
        if admissions:
            self._clock_offset = admissions[-1].now - time.time()
        outcome.saturated = not outcome.backpressured
        for (_, wanted), admission in zip(requests, admissions, strict=True):  # one admission per request
            outcome.saturated &= len(admission.messages) + admission.malformed < wanted
            outcome.malformed += admission.malformed
            if admission.messages:
                source = sources[admission.source]
                tasks = self._valid_tasks(admission, source)
                outcome.admitted += len(tasks)
                if tasks:
                    work.append((None if source.browser else source.queue, tasks))
                if admission.wait_seconds:  # when its next queued host may take a task (admit.lua)
                    waits.append(admission.wait_seconds)
            elif admission.status == "active_limit" and admission.wait_seconds is not None:
                # room comes from a release (which wakes us) or from reaping the earliest lease when it expires
                self._next_reap = min(self._next_reap, time.monotonic() + admission.wait_seconds)
            elif admission.wait_seconds is not None:
                waits.append(admission.wait_seconds)
        if work:
            self._unpublished.extend(work)
            outcome.published_messages = self._publish_pending()
        self.totals.admitted += outcome.admitted
        self.totals.malformed += outcome.malformed

    def destination(self, source: RegisteredSource) -> str:
        """The Redis list the source's admitted tasks wait in: its Celery queue, or its country's slot list."""
        if source.browser and self.browser_handoff is not None:
            return self.browser_handoff.backlog_key(source.country)
        return source.queue

    def _deliverable(self, sources: dict[str, RegisteredSource]) -> dict[str, RegisteredSource]:
        """The sources this distributor can deliver: a browser source needs the page slots' hand-off."""
        if self.browser_handoff is not None:
            return sources
        for name in sorted(name for name, source in sources.items() if source.browser):
            if name not in self._undeliverable:
                self._undeliverable.add(name)
                log.warning("%s is a browser source and this distributor has no page-slot hand-off: its tasks "
                            "wait for one that has (`harvester distributor` starts with it)", name)
        return {name: source for name, source in sources.items() if not source.browser}

    def _valid_tasks(self, admission: Admission, source: RegisteredSource) -> list[dict[str, Any]]:
        """Admitted messages as dicts; one that is not a valid TaskMessage goes to dead letters with the reason
        (:meth:`RateLimitStore.admitted_messages`). A browser task without a country (pushed by a tool) takes its
        source's."""
        messages = self.store.admitted_messages(admission.source, admission.messages, admission.tokens)
        self.totals.malformed += len(admission.messages) - len(messages)
        tasks = []
        for message in messages:
            task = message.model_dump(mode="json")  # the fencing token travels with the Celery message
            if source.browser and not task.get("country"):
                task["country"] = source.country
            tasks.append(task)
        return tasks

    def _publish_pending(self) -> int:
        """Send admitted work (HTTP tasks as Celery messages, browser tasks to their country's slot list),
        then confirm it: the reservations then last while the tasks queue.

        Crash between the two, and the reservations expire after ``publish_grace_seconds``: the tasks
        return to intake uncharged, and the messages already sent are stale (workers drop them).
        """
        if not self._unpublished:
            return 0
        published = self._unpublished
        celery_work = [(queue, tasks) for queue, tasks in published if queue is not None]
        browser_tasks = [task for queue, tasks in published if queue is None for task in tasks]
        if browser_tasks:
            self._hand_over(browser_tasks)
            self._unpublished = celery_work
        sent = self.publisher.publish(celery_work) if celery_work else 0
        self._unpublished = []
        self.totals.published_messages += sent
        by_source: dict[str, dict[str, str]] = {}
        for _, tasks in published:
            for task in tasks:
                by_source.setdefault(task["source"], {})[task["task_id"]] = task["lease_token"]
        self.store.mark_published_many(list(by_source.items()))
        return sent

    def _hand_over(self, tasks: list[dict[str, Any]]) -> None:
        """Browser tasks to the slots of each task's country, in one round trip."""
        if self.browser_handoff is None:
            raise DistributorError("browser tasks admitted without a page-slot hand-off")
        handoff = self.browser_handoff
        by_country: dict[str, list[dict[str, Any]]] = {}
        for task in tasks:
            by_country.setdefault(str(task["country"]), []).append(task)

        def build(pipeline: ScriptPipeline) -> None:
            for country, group in by_country.items():
                handoff.hand_over(pipeline, country, group)

        self.store.scripts.run_pipeline(build)

    def messages_for(self, source: str, tasks: int) -> int:
        """The fewest Celery messages ``tasks`` of ``source`` go in: ``chain_message_spread`` for a source that
        follows chains (its batches follow them on one core each), else one (``publish_batch_size`` decides)."""
        registered = self.known.sources.get(source)
        return self.settings.chain_message_spread if registered is not None and registered.follows_chains else 1

    def batch_time_limit(self, source: str, tasks: int) -> float:
        """Celery's hard time limit of one message: every fetch ends by the source's timeout, storing gets
        two leases, and the per_minute tokens of the batch may take their share of windows. Keep
        ``celery_visibility_timeout_seconds`` above it, so kombu never redelivers a running batch."""
        registered = self.known.sources.get(source)
        timeout = registered.timeout if registered is not None else 30.0
        per_minute = registered.per_minute if registered is not None and registered.per_minute > 0 else tasks
        rate_windows = -(-tasks // per_minute)
        return timeout * 2 + 2 * self.settings.lease_seconds + rate_windows * self.settings.rate_window_seconds + 30

    def reap(self) -> int:
        """Expired reservations and leases of the sources that have any (harvester.distributor.ready_work)."""
        names = self.leased.to_reap(self.known.current())
        result = self.store.reap(names)
        self.leased.drop_empty(names)
        self._next_reap = time.monotonic() + self.settings.reap_interval_seconds
        self.totals.reaped += result.reaped
        if result.reaped:
            log.info("reaped %d expired leases", result.reaped)
        if result.returned:
            log.info("%d reservations never started (unpublished or their message lost) went back to intake, "
                     "uncharged", result.returned)
        for source, entries in result.dead_letters.items():
            log.warning("%s: %d tasks dead-lettered after their last lease expired", source, len(entries))
            if self.on_dead_letters is not None:
                self.on_dead_letters(source, entries)
        return result.reaped

    def return_lost_messages(self) -> int:
        """Queued tasks whose Celery message was lost back to intake (harvester.distributor.lost_messages)."""
        leased = self.leased.members()  # queued reservations are leases: a source without any has none to lose
        queues = {name: source.queue for name, source in self.known.current().items()
                  if not source.browser and name in leased}
        returned = self.lost_messages.look(queues)
        if returned:
            pipeline = self.redis.pipeline(transaction=False)
            for name in returned:
                wake_distributors(pipeline, name)
            pipeline.execute()
        return sum(returned.values())

    @staticmethod
    def fair_order(sources: list[RegisteredSource], round_number: int) -> list[RegisteredSource]:
        """High-priority sources first; inside each tier the starting source rotates every round."""
        ordered: list[RegisteredSource] = []
        for tier in (True, False):
            members = sorted((s for s in sources if s.high_priority is tier), key=lambda s: s.name)
            if members:
                shift = round_number % len(members)
                ordered += members[shift:] + members[:shift]
        return ordered

    def server_now(self) -> float:
        """The Redis server's clock, as every script uses it: this machine's clock plus the offset measured
        with TIME (once, then refreshed by every admission's reply), so due times agree on every machine."""
        if self._clock_offset is None:
            seconds, microseconds = self.redis.time()
            self._clock_offset = seconds + microseconds / 1_000_000 - time.time()
        return time.time() + self._clock_offset

    # -- waiting ----------------------------------------------------------------------------------
    def _wait_seconds(self, outcome: RoundOutcome) -> float:
        candidates = [max(0.0, self._next_reap - time.monotonic())]
        if outcome.wait_seconds is not None:
            candidates.append(outcome.wait_seconds)
        if outcome.backpressured:
            candidates.append(BACKPRESSURE_POLL_SECONDS)
        if not self.known.sources:
            candidates.append(SOURCES_REFRESH_SECONDS * 5)
        return max(0.005, min(MAX_WAIT_SECONDS, *candidates))

    def wait_for_work(self, seconds: float) -> bool:
        """Block until a wake-up token arrives (new intake, a released lease) or ``seconds`` pass."""
        self._waiting = True
        try:
            if self.stopping:
                return False
            reply = self.blocking.blpop([INTAKE_SIGNAL], timeout=seconds)
        except ShutdownRequested:
            self.blocking.connection_pool.disconnect()  # the interrupted reply is unusable
            raise
        finally:
            self._waiting = False
        if reply is None:
            return False
        # the token names the source that woke us: one not known yet has just registered, so read the
        # sources now; a known one (a released lease, more intake) changes nothing the 1 s refresh misses
        woken_by = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
        if woken_by not in self.known.sources:
            self.known.read_index_soon()
        return True

    # -- outages ----------------------------------------------------------------------------------
    def _redis_location(self) -> str:
        pool = self.redis.connection_pool
        if (service := getattr(pool, "service_name", None)) is not None:  # a Sentinel pool: no fixed address
            return f"the primary {service!r} of the sentinels"
        kwargs = pool.connection_kwargs
        return kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"

    def _outage(self, error: BaseException) -> None:
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            log.warning("Redis unavailable at %s (%s: %s); retrying with backoff up to %.1fs",
                        self._redis_location(), type(error).__name__, error, self.settings.redis_retry_max_seconds)

    def _back_online(self) -> None:
        if self._outage_since is not None:
            log.warning("Redis reachable again after %.1fs", time.monotonic() - self._outage_since)
            self._outage_since = None
            self.known.read_all_soon()
            self.ready_work.sweep_soon()
            self.leased.sweep_soon()
