"""The global rate-limit store (DESIGN.md section 4): admission, leases, retries, pauses and stats in Redis.

Every decision is one atomic Lua call on the keys of one source (they share the ``{source}`` hash tag),
so any number of distributors and workers on any number of machines hold a source to its limits.
Times come from the Redis server clock unless a caller passes ``now`` (tests do, to step time).

Delivery (no fetch outside admission): admission RESERVES capacity under a fencing token per task and attempt; the lease
starts when a worker starts the task (:meth:`RateLimitStore.start`), and heartbeat, release and fail act
only for the holder of the matching token. A stale holder changes nothing and is counted (``stale``);
a redelivered message whose tasks are no longer held is dropped and counted (``stale_deliveries``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
import redis

from harvester.distributor.endings import RetryPolicy, TaskEnding
from harvester.distributor.hosts import host_of
from harvester.distributor.messages import TaskMessage
from harvester.distributor.scripts import distributor_scripts
from harvester.errors import redis_storage_errors
from harvester.redis_keys import INTAKE_SIGNAL, SOURCES_INDEX, SOURCES_WITH_LEASES, SOURCES_WITH_WORK, SourceKeys
from harvester.redis_scripts import ScriptPipeline, text
from harvester.settings import HarvesterSettings
from harvester.source_stats import SourceStats

SIGNAL_BACKLOG = 64  # wake-up tokens kept at most; one is enough to wake a distributor
ADMIT_CHUNK = 1000  # tasks per atomic admit call: a large batch is several bounded calls in one round trip
PROMOTE_LIMIT = 1000  # due retries moved to the front of intake per source before each admission
PARK_LIMIT = 1000  # intake tasks one admit call may move to their hosts' queues (admit.lua)
LIVE_SCAN_PAGE = 1000  # entries read per command inside live_tasks.lua
KILLS_ALLOWED = 2  # a batch that kills its worker this many times is dead-lettered with that reason

Leases = Mapping[str, str]  # task id -> fencing token


def _lease_arguments(leases: Leases) -> list[str]:
    """(task id, token) pairs flattened into ARGV."""
    return [part for task_id, token in leases.items() for part in (task_id, str(token))]


def _now_argument(now: float | None) -> str:
    return "" if now is None else repr(float(now))


def wake_distributors(pipeline: redis.client.Pipeline, source: str, work: bool = True) -> None:
    """Queue the wake-up token a waiting distributor blocks on (BLPOP), bounded in length. ``work``: the
    commands queued before this one may have given the source tasks to admit (a push, a retry, a lease
    back): the source joins the sources with work, after them (harvester.distributor.ready_work)."""
    if work:
        pipeline.sadd(SOURCES_WITH_WORK, source)
    pipeline.lpush(INTAKE_SIGNAL, source)
    pipeline.ltrim(INTAKE_SIGNAL, 0, SIGNAL_BACKLOG - 1)


@dataclass(frozen=True)
class Admission:
    """What one admit call did for one source."""

    source: str
    status: str  # ok | empty | active_limit | rate_limit | paused | unregistered | host_limit
    wait_seconds: float | None  # when admission may succeed again (None: only a new event will tell)
    pending: int  # intake length after the call
    malformed: int  # messages moved to dead letters by this call
    now: float  # the server time the call decided at (s)
    active: int  # the source's tasks reserved or in flight right after the call
    messages: list[str] = field(default_factory=list)  # admitted task messages, raw JSON
    tokens: list[str] = field(default_factory=list)  # the fencing token of each admitted message

    def leases(self) -> dict[str, str]:
        """Task id -> token of the admitted tasks (what :meth:`RateLimitStore.mark_published` takes)."""
        return {message.task_id: str(message.lease_token) for message in self.task_messages()}

    def deliveries(self) -> list[dict[str, Any]]:
        """The admitted tasks as the distributor publishes them: message dicts carrying their lease token."""
        return [message.model_dump(mode="json") for message in self.task_messages()]

    def task_messages(self) -> list[TaskMessage]:
        """The admitted tasks as a worker holds them (with their lease tokens); raises on a malformed one (tests and
        tools that admitted well-formed tasks; the distributor and workers use
        :meth:`RateLimitStore.admitted_messages`, which dead-letters it)."""
        return [admitted_message(raw, token) for raw, token in zip(self.messages, self.tokens, strict=True)]


def admitted_message(raw: str | bytes, token: str) -> TaskMessage:
    """One admitted message as its holder holds it, carrying its lease token (the one parser of admitted JSON);
    raises :class:`pydantic.ValidationError` when it is no valid :class:`TaskMessage`."""
    return TaskMessage.model_validate_json(raw).model_copy(update={"lease_token": token})


def malformed_reason(error: pydantic.ValidationError) -> str:
    """The dead letter's reason for a message that is no valid task: each field and what is wrong with it."""
    return "malformed message: " + "; ".join(
        f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in error.errors())


@dataclass(frozen=True)
class StartResult:
    """What a worker's start call gave it: the tasks it holds (fetch only these) and how many it does not."""

    held: list[str]
    stale: int


@dataclass(frozen=True)
class ChainStep:
    """:meth:`RateLimitStore.continue_chain`'s answer: ``ok`` and the child's token, or why not (continue_chain.lua)."""

    status: str
    token: str | None


@dataclass(frozen=True)
class FetchTokens:
    """per_minute tokens taken in one call: ``granted`` requests may start now, none of ``lost`` (lease gone); when
    fewer than asked, ``wait_seconds`` says when the window has room for the next one (0.0 when all were granted)."""

    granted: int
    wait_seconds: float
    lost: frozenset[str] = frozenset()


@dataclass(frozen=True)
class WorkerLostResult:
    retried: int
    returned: int  # tasks of the batch that had not started: back to intake uncharged
    dead_entries: list[str]  # dead-letter entries created (a batch that killed its worker twice)


@dataclass(frozen=True)
class ReapResult:
    reaped: int  # started tasks whose lease expired
    dead_letters: dict[str, list[str]]  # source -> dead-letter entries (JSON) created by this reap
    returned: int = 0  # reservations never started (unpublished, or their message lost): back uncharged


class RateLimitStore:
    """Admission, leases, retries and stats of every source, shared by all distributors and workers."""

    def __init__(
        self, redis_client: redis.Redis, settings: HarvesterSettings, retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.retry_policy = retry_policy or RetryPolicy.from_settings(self.settings)
        self.scripts = distributor_scripts(redis_client)

    # -- admission ---------------------------------------------------------------------------------
    def admit(self, source: str, wanted: int, now: float | None = None, beside_others: bool = False) -> Admission:
        """Admit up to ``wanted`` tasks of ``source`` from its intake, within its limits, in one call; ``beside_others``
        (a batch's refill): a task that must run alone (``TaskMessage.run_alone``) is left for the distributor."""
        return self.admit_many([(source, wanted)], now, beside_others)[0]

    @redis_storage_errors()
    def admit_many(self, requests: list[tuple[str, int]], now: float | None = None,
                   beside_others: bool = False) -> list[Admission]:
        """One admission per (source, wanted), all in one pipelined round trip: the source's due retries
        promoted to the front of its intake, then a few atomic admit calls of at most ``ADMIT_CHUNK`` tasks
        (a Lua call never handles an unbounded batch)."""
        if not requests:
            return []
        calls: list[tuple[int, str]] = []  # (request index, "promote" or "admit") of each call, in order

        def build(pipeline: ScriptPipeline) -> None:
            calls.clear()  # build runs again when Redis forgot the scripts
            for index, (source, wanted) in enumerate(requests):
                pipeline.call("promote_due", source, now=_now_argument(now), limit=PROMOTE_LIMIT)
                calls.append((index, "promote"))
                count = max(0, int(wanted))
                for size in [min(ADMIT_CHUNK, count - start) for start in range(0, count, ADMIT_CHUNK)] or [0]:
                    pipeline.call("admit", source, wanted=size,
                                  publish_grace_seconds=self.settings.publish_grace_seconds,
                                  window_seconds=self.settings.rate_window_seconds
                                  + self.settings.rate_window_margin_seconds, now=_now_argument(now),
                                  expected_source=source, dead_letters_max=self.settings.dead_letters_max_per_source,
                                  host_queue_prefix=SourceKeys(source).host_queue_prefix, park_limit=PARK_LIMIT,
                                  beside_others="1" if beside_others else "0")
                    calls.append((index, "admit"))
            # after the admissions: a source that now has reservations is one the reaper looks at (ready_work)
            pipeline.pipeline.sadd(SOURCES_WITH_LEASES, *sorted({source for source, _ in requests}))

        replies = self.scripts.run_pipeline(build)[:-1]  # the last reply is the SADD's
        merged: list[Admission | None] = [None] * len(requests)
        next_due: list[float] = [-1.0] * len(requests)
        for (index, kind), reply in zip(calls, replies, strict=True):
            if kind == "promote":
                next_due[index] = reply.next_due_seconds
            else:
                merged[index] = self._admission(requests[index][0], reply, next_due[index], merged[index])
        return [admission for admission in merged if admission is not None]

    @staticmethod
    def _admission(source: str, reply: Any, next_due_seconds: float, before: Admission | None = None) -> Admission:
        tokens = [str(reply.first_token + offset) for offset in range(len(reply.messages))]
        wait = next_due_seconds if reply.status == "empty" else reply.wait_seconds  # empty: the next retry due
        admission = Admission(
            source=source, status=reply.status, wait_seconds=None if wait < 0 else wait,
            pending=reply.pending, malformed=reply.malformed, now=reply.now, active=reply.active,
            messages=reply.messages, tokens=tokens,
        )
        if before is None:
            return admission
        return Admission(
            source=source, status="ok" if before.messages or admission.messages else admission.status,
            wait_seconds=admission.wait_seconds, pending=admission.pending,
            malformed=before.malformed + admission.malformed, now=admission.now, active=admission.active,
            messages=before.messages + admission.messages, tokens=before.tokens + admission.tokens,
        )

    @redis_storage_errors()
    def mark_published(self, source: str, leases: Leases, now: float | None = None) -> int:
        """The distributor sent these admitted tasks to Celery: their reservations last while they queue."""
        return self.mark_published_many([(source, leases)], now)

    @redis_storage_errors()
    def mark_published_many(self, published: list[tuple[str, Leases]], now: float | None = None) -> int:
        """:meth:`mark_published` of several sources in one round trip."""
        published = [(source, leases) for source, leases in published if leases]
        if not published:
            return 0

        def build(pipeline: ScriptPipeline) -> None:
            for source, leases in published:
                pipeline.call("mark_published", source, queued_lease_seconds=self.settings.queued_lease_seconds,
                              now=_now_argument(now), leases=_lease_arguments(leases))

        return sum(reply.marked for reply in self.scripts.run_pipeline(build))

    # -- leases ------------------------------------------------------------------------------------
    @redis_storage_errors()
    def start(self, source: str, leases: Leases, now: float | None = None) -> StartResult:
        """A worker's first act on a batch: start the tasks still reserved under these tokens (their leases
        begin now) and return them; the worker fetches only those. The rest are stale deliveries."""
        if not leases:
            return StartResult([], 0)
        reply = self.scripts.call("start", source, lease_seconds=self.settings.lease_seconds, now=_now_argument(now),
                                  leases=_lease_arguments(leases))
        return StartResult(list(reply.held), len(leases) - len(reply.held))

    @redis_storage_errors()
    def take_queued(self, source: str, wanted: int, now: float | None = None) -> list[TaskMessage]:
        """A running batch with room takes on up to ``wanted`` tasks of ``source`` that were admitted and published
        but not started (their message still waits for a worker process): started now under fresh tokens, oldest
        first (``lua/take_queued.lua``). Their message, when it runs, no longer holds them and drops them."""
        if wanted <= 0:
            return []
        reply = self.scripts.call("take_queued", source, wanted=int(wanted), lease_seconds=self.settings.lease_seconds,
                                  now=_now_argument(now))
        tokens = [str(reply.first_token + offset) for offset in range(len(reply.messages))]
        return self.admitted_messages(source, reply.messages, tokens, now)

    @redis_storage_errors()
    def admitted_messages(self, source: str, messages: list[str], tokens: list[str],
                          now: float | None = None) -> list[TaskMessage]:
        """Admitted (or taken) messages as their holder holds them, each with its token, parsed in one place: one
        that is no valid :class:`TaskMessage` is dead-lettered at once with the reason (one round trip for all), so
        the distributor and a refilling worker reject alike and no caller parses admitted JSON on its own."""
        valid: list[TaskMessage] = []
        rejected: list[TaskEnding] = []
        for raw, token in zip(messages, tokens, strict=True):
            try:
                valid.append(admitted_message(raw, token))
            except pydantic.ValidationError as error:
                rejected.append(TaskEnding.rejection(source, raw, malformed_reason(error), token))
        if rejected:
            self.end_tasks(rejected, now=now)
        return valid

    @redis_storage_errors()
    def continue_chain(self, parent: TaskMessage, child: TaskMessage, now: float | None = None) -> ChainStep:
        """A worker that finished ``parent`` (a page of a chain: its next request is built from its response) takes
        ``child`` itself, in the same batch: ``parent``'s lease is released and ``child`` admitted and started in its
        place, under admission's own checks, in one atomic call (``lua/continue_chain.lua``). ``token`` is None when
        the limits or a pause said no: then the child goes through intake as any discovered task."""
        reply = self.scripts.call(
            "continue_chain", parent.source, parent_id=parent.task_id, parent_token=str(parent.lease_token),
            child_id=child.task_id, child_message=child.to_json(), lease_seconds=self.settings.lease_seconds,
            window_seconds=self.settings.rate_window_seconds + self.settings.rate_window_margin_seconds,
            now=_now_argument(now))
        return ChainStep(reply.status, reply.token or None)

    @redis_storage_errors()
    def heartbeat(self, source: str, leases: Leases, now: float | None = None) -> list[str]:
        """Extend the leases still held under these tokens; returns their task ids (a reaped lease is lost:
        its task is someone else's now, and the batch must neither fetch nor settle it)."""
        if not leases:
            return []
        return list(self.scripts.call("heartbeat", source, lease_seconds=self.settings.lease_seconds,
                                      now=_now_argument(now), leases=_lease_arguments(leases)).held)

    @redis_storage_errors()
    def release(self, source: str, leases: Leases) -> int:
        """The tasks' output is stored and counted down: free the leases still held under these tokens (and
        wake a distributor waiting for room). A stale holder frees nothing."""
        if not leases:
            return 0

        def build(pipeline: ScriptPipeline) -> None:
            pipeline.call("release", source, leases=_lease_arguments(leases))
            wake_distributors(pipeline.pipeline, source, work=False)  # room, not work: its intake is indexed

        return self.scripts.run_pipeline(build)[0].released

    def fail(
        self, message: TaskMessage, reason: str, retry_after: float | None = None, now: float | None = None,
    ) -> bool:
        """A task failed: free its lease, then retry it after backoff (or ``retry_after`` seconds, which also
        pauses its host for every worker), or past the source's ``retries`` dead-letter it with ``reason``.

        Returns True when the task went to dead letters. Only the holder of ``message.lease_token`` acts:
        a stale holder (the task was reaped and handed on) changes nothing, and False is returned.
        """
        return self.end_tasks([TaskEnding.failure(message, reason, retry_after)], now=now)[0] == "dead"

    def reject(self, source: str, raw_message: str, reason: str, now: float | None = None,
               token: str | None = None) -> bool:
        """Dead-letter an admitted task at once, whatever its retries (a malformed message, or a failure
        retrying cannot fix). True when done; False when the lease was no longer held under ``token``
        (default: the message's own ``lease_token``)."""
        return self.end_tasks([TaskEnding.rejection(source, raw_message, reason, token)], now=now)[0] == "dead"

    @redis_storage_errors()
    def end_tasks(self, endings: list[TaskEnding], pauses: Iterable[tuple[str, str, float]] = (),
                  now: float | None = None) -> list[str]:
        """Record many tasks' endings (:meth:`fail`, :meth:`reject`) and Retry-After pauses ((source, host or ""
        for the whole source, seconds): :meth:`pause_host`, :meth:`pause_source`) in ONE round trip, the pauses
        first; each ending's outcome in order: ``retry``, ``dead`` or ``no_lease`` (a stale holder)."""
        pauses = list(pauses)

        def build(pipeline: ScriptPipeline) -> None:
            for source, host, seconds in pauses:
                self._queue_pause(pipeline, source, host, seconds, now)
            for ending in endings:
                message, attempt = ending.message, ending.message.attempt if ending.message is not None else 0
                next_attempt = attempt if ending.keep_attempt else attempt + 1
                pipeline.call(
                    "fail", ending.source, task_id=ending.task_id,
                    next_attempt=next_attempt if message is not None else 2**31,
                    retry_message=message.model_copy(update={"attempt": next_attempt}).to_json() if message
                    else ending.original, original_message=ending.original, reason=ending.reason,
                    delay_seconds=self.retry_policy.delay(attempt, ending.retry_after), now=_now_argument(now),
                    host=host_of(message.url) if message is not None else "",
                    pause_host_seconds=ending.retry_after or 0, token=ending.token or "",
                    dead_letters_max=self.settings.dead_letters_max_per_source,
                    host_pause_max_seconds=self.settings.host_pause_max_seconds)
            for source in sorted({ending.source for ending in endings}):
                wake_distributors(pipeline.pipeline, source)

        return [reply.outcome for reply in self.scripts.run_pipeline(build)[len(pauses):len(pauses) + len(endings)]]

    @redis_storage_errors()
    def worker_lost(self, source: str, leases: Leases, now: float | None = None) -> WorkerLostResult:
        """The pool process running a batch died: its tasks come back through admission (started ones with
        attempt + 1 after a lease, so the dead process's requests drain at the site first); a task whose
        batch killed its worker ``KILLS_ALLOWED`` times is dead-lettered with that reason."""
        if not leases:
            return WorkerLostResult(0, 0, [])

        def build(pipeline: ScriptPipeline) -> None:
            pipeline.call("worker_lost", source, now=_now_argument(now), delay_seconds=self.settings.lease_seconds,
                          kills_allowed=KILLS_ALLOWED, dead_letters_max=self.settings.dead_letters_max_per_source,
                          leases=_lease_arguments(leases))
            wake_distributors(pipeline.pipeline, source)

        reply = self.scripts.run_pipeline(build)[0]
        return WorkerLostResult(reply.retried, reply.returned, list(reply.dead_entries))

    def acquire_fetch(self, source: str, now: float | None = None) -> float:
        """Take one per_minute token for a request about to start; 0.0 when taken, else seconds to wait."""
        return self.acquire_fetches(source, 1, now).wait_seconds

    @redis_storage_errors()
    def acquire_fetches(self, source: str, count: int, now: float | None = None,
                        leases: Leases | None = None) -> FetchTokens:
        """Up to ``count`` per_minute tokens at once for a batch's requests (one round trip), as many as the window
        has room for; none for a task of ``leases`` no longer held or expired (``lost``: the new holder fetches it)."""
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        window = self.settings.rate_window_seconds + self.settings.rate_window_margin_seconds
        reply = self.scripts.call("acquire_fetch", source, window_seconds=window, count=count, now=_now_argument(now),
                                  leases=_lease_arguments(leases or {}))
        return FetchTokens(reply.granted, reply.wait_seconds, frozenset(reply.lost))

    @redis_storage_errors()
    def live_task_ids(self, source: str, run_id: str) -> set[str]:
        """Ids of one run's tasks in intake, delayed, reserved or leased: one atomic look (it cannot miss a
        task moving from intake to a lease while it looks)."""
        return set(self.scripts.call("live_tasks", source, run_id=run_id, page=LIVE_SCAN_PAGE,
                                     host_queue_prefix=SourceKeys(source).host_queue_prefix).task_ids)

    @redis_storage_errors()
    def reap(self, sources: Iterable[str] | None = None, now: float | None = None) -> ReapResult:
        """Expired leases of every (or the given) source back to intake or to dead letters; one round trip."""
        names = sorted(self.registered_sources() if sources is None else sources)
        if not names:
            return ReapResult(0, {})

        def build(pipeline: ScriptPipeline) -> None:
            for name in names:
                pipeline.call("reap", name, now=_now_argument(now), limit=self.settings.reap_batch_size,
                              dead_letters_max=self.settings.dead_letters_max_per_source)

        replies = self.scripts.run_pipeline(build)
        brought_back = [name for name, reply in zip(names, replies, strict=True) if reply.reaped or reply.returned]
        if brought_back:  # tasks are back in intake or delayed: wake the distributors waiting for work
            pipeline = self.redis.pipeline(transaction=False)
            for name in brought_back:
                wake_distributors(pipeline, name)
            pipeline.execute()
        reaped = sum(reply.reaped for reply in replies)
        dead = {name: reply.dead_entries for name, reply in zip(names, replies, strict=True) if reply.dead_entries}
        return ReapResult(reaped, dead, sum(reply.returned for reply in replies))

    # -- Retry-After -------------------------------------------------------------------------------
    def pause_source(self, source: str, seconds: float, now: float | None = None) -> float:
        """No task of ``source`` is admitted for ``seconds`` (a 429/503 Retry-After for the whole site)."""
        return self._pause(source, "", seconds, now)

    def pause_host(self, source: str, host: str, seconds: float, now: float | None = None) -> float:
        """No task of ``source`` on ``host`` (as :func:`host_of` gives it) is admitted for ``seconds``."""
        return self._pause(source, host, seconds, now)

    @redis_storage_errors()
    def _pause(self, source: str, host: str, seconds: float, now: float | None) -> float:
        return self.scripts.run_pipeline(lambda pipeline: self._queue_pause(pipeline, source, host, seconds, now)
                                         )[0].paused_until

    def _queue_pause(self, pipeline: ScriptPipeline, source: str, host: str, seconds: float,
                     now: float | None) -> None:
        """A host's pause (its key expires with the pause, so it is capped) or, ``host`` "", the source's."""
        keys = SourceKeys(source)
        if host:
            pipeline.call("pause", source, {"paused": keys.host_paused},
                          seconds=min(float(seconds), self.settings.host_pause_max_seconds), now=_now_argument(now),
                          host=host.lower())
        else:
            pipeline.call("pause", source, {"paused": keys.paused_until}, seconds=float(seconds),
                          now=_now_argument(now), host="")

    # -- numbers -----------------------------------------------------------------------------------
    @redis_storage_errors()
    def registered_sources(self) -> list[str]:
        return sorted(text(name) for name in self.redis.smembers(SOURCES_INDEX))

    @redis_storage_errors()
    def stats(self, sources: list[str]) -> dict[str, SourceStats]:
        """Pending, delayed, active, fetch starts in the window, done, failed, dead letters of each source:
        one round trip."""
        if not sources:
            return {}
        replies = self.scripts.run_pipeline(lambda pipeline: self.queue_stats(pipeline, sources))
        return {name: self.source_stats(reply) for name, reply in zip(sources, replies, strict=True)}

    def queue_stats(self, pipeline: ScriptPipeline, sources: list[str]) -> None:
        """Queue ``stats.lua`` of each source on a pipeline another reader runs (the metrics snapshot)."""
        for name in sources:
            self.scripts.queue(pipeline, "stats", name, window_seconds=self.settings.rate_window_seconds)

    @staticmethod
    def source_stats(reply: Any) -> SourceStats:
        """A decoded ``stats.lua`` reply as :class:`SourceStats` (the reply's fields are its fields)."""
        return SourceStats(*reply)

    def stats_all(self) -> dict[str, SourceStats]:
        """:meth:`stats` of every registered source (two round trips)."""
        return self.stats(self.registered_sources())

    @redis_storage_errors()
    def count_outcomes(self, source: str, outcomes: Mapping[str, int],
                       pipeline: redis.client.Pipeline | None = None) -> None:
        """Add to the source's per-outcome counters (``outcome:<name>`` in its counters hash); queued on
        ``pipeline`` when given (the caller sends it), else sent at once."""
        if not outcomes:
            return
        own = pipeline is None
        pipeline = self.redis.pipeline(transaction=False) if pipeline is None else pipeline
        for name, amount in outcomes.items():
            pipeline.hincrby(SourceKeys(source).counters, f"outcome:{name}", int(amount))
        if own:
            pipeline.execute()

    @redis_storage_errors()
    def counters(self, source: str) -> dict[str, int]:
        """Every running total of a source (admitted, done, failed, dead, retried, reaped, outcome:*...)."""
        return {text(k): int(v) for k, v in self.redis.hgetall(SourceKeys(source).counters).items()}

    @redis_storage_errors()
    def active_task_ids(self, source: str) -> list[str]:
        return [text(task_id) for task_id in self.redis.zrange(SourceKeys(source).active, 0, -1)]

    @redis_storage_errors()
    def server_time(self) -> float:
        seconds, microseconds = self.redis.time()
        return seconds + microseconds / 1_000_000
