"""The global rate-limit store (DESIGN.md section 4): admission, leases, retries, pauses and stats in Redis.

Every decision is one atomic Lua call on the keys of one source (they share the ``{source}`` hash tag),
so any number of distributors and workers on any number of machines hold a source to its limits.
Times come from the Redis server clock unless a caller passes ``now`` (tests do, to step time).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from harvester.distributor.hosts import host_of
from harvester.distributor.messages import TaskMessage
from harvester.distributor.scripts import ScriptPipeline, Scripts, text
from harvester.errors import redis_storage_errors
from harvester.redis_keys import INTAKE_SIGNAL, SOURCES_INDEX, SourceKeys
from harvester.settings import HarvesterSettings, get_settings

SIGNAL_BACKLOG = 64  # wake-up tokens kept at most; one is enough to wake a distributor


def _now_argument(now: float | None) -> str:
    return "" if now is None else repr(float(now))


def wake_distributors(pipeline: redis.client.Pipeline, source: str) -> None:
    """Queue the wake-up token a waiting distributor blocks on (BLPOP), bounded in length."""
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
    active: int  # the source's tasks in flight right after the call
    messages: list[str] = field(default_factory=list)  # admitted task messages, raw JSON


@dataclass(frozen=True)
class SourceStats:
    """One source's numbers for the UI and metrics (DESIGN.md section 4)."""

    pending: int
    delayed: int
    active: int
    admitted_last_minute: int  # admissions in the rolling rate window (settings.rate_window_seconds)
    done: int
    failed: int
    dead: int  # entries now in dead letters
    admitted: int = 0  # total ever admitted
    dead_total: int = 0  # total ever dead-lettered (requeued ones included)


@dataclass(frozen=True)
class ReapResult:
    reaped: int
    dead_letters: dict[str, list[str]]  # source -> dead-letter entries (JSON) created by this reap


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with a little jitter, capped; a server's Retry-After wins."""

    base_seconds: float = 2.0
    max_seconds: float = 300.0
    jitter: float = 0.1

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> RetryPolicy:
        return cls(settings.retry_base_seconds, settings.retry_max_seconds)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before attempt ``attempt + 1`` may run (``attempt`` is the one that just failed)."""
        if retry_after is not None:
            return max(0.0, float(retry_after))
        backoff = self.base_seconds * (2 ** min(attempt, 30))
        return min(self.max_seconds, backoff * (1 + random.uniform(0, self.jitter)))


class RateLimitStore:
    """Admission, leases, retries and stats of every source, shared by all distributors and workers."""

    def __init__(
        self, redis_client: redis.Redis, settings: HarvesterSettings | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.redis = redis_client
        self.settings = settings or get_settings()
        self.retry_policy = retry_policy or RetryPolicy.from_settings(self.settings)
        self.scripts = Scripts(redis_client)

    # -- admission ---------------------------------------------------------------------------------
    def admit(self, source: str, wanted: int, now: float | None = None) -> Admission:
        """Admit up to ``wanted`` tasks of ``source`` from its intake, within its limits, in one call."""
        return self.admit_many([(source, wanted)], now)[0]

    @redis_storage_errors()
    def admit_many(self, requests: list[tuple[str, int]], now: float | None = None) -> list[Admission]:
        """One admit call per (source, wanted), all in one pipelined round trip (each call stays atomic)."""
        if not requests:
            return []

        def build(pipeline: ScriptPipeline) -> None:
            for source, wanted in requests:
                pipeline.call("admit", source, wanted=int(wanted), lease_seconds=self.settings.lease_seconds,
                              window_seconds=self.settings.rate_window_seconds, now=_now_argument(now),
                              expected_source=source)

        replies = self.scripts.run_pipeline(build)
        return [self._admission(source, reply) for (source, _), reply in zip(requests, replies, strict=True)]

    @staticmethod
    def _admission(source: str, reply: Any) -> Admission:
        return Admission(
            source=source, status=reply.status, wait_seconds=None if reply.wait_seconds < 0 else reply.wait_seconds,
            pending=reply.pending, malformed=reply.malformed, now=reply.now, active=reply.active,
            messages=reply.messages,
        )

    # -- leases ------------------------------------------------------------------------------------
    @redis_storage_errors()
    def heartbeat(self, source: str, task_ids: list[str], now: float | None = None) -> int:
        """Extend the leases of ``task_ids``; returns how many are still held (a reaped lease is lost)."""
        if not task_ids:
            return 0
        return self.scripts.call("heartbeat", source, lease_seconds=self.settings.lease_seconds,
                                 now=_now_argument(now), task_ids=task_ids).extended

    @redis_storage_errors()
    def release(self, source: str, task_ids: list[str]) -> int:
        """The tasks' output is stored: free their leases (and wake a distributor waiting for room)."""
        if not task_ids:
            return 0

        def build(pipeline: ScriptPipeline) -> None:
            pipeline.call("release", source, task_ids=list(task_ids))
            wake_distributors(pipeline.pipeline, source)

        return self.scripts.run_pipeline(build)[0].released

    def fail(
        self, message: TaskMessage, reason: str, retry_after: float | None = None, now: float | None = None,
    ) -> bool:
        """A task failed: free its lease, then retry it after backoff (or ``retry_after`` seconds, which also
        pauses its host for every worker), or past the source's ``retries`` dead-letter it with ``reason``.

        Returns True when the task went to dead letters. A task whose lease was already reaped is left
        alone (the reaper re-queued it), and False is returned.
        """
        return self._fail(message.source, message.task_id, message, message.to_json(), reason, retry_after, now)

    def reject(self, source: str, raw_message: str, reason: str, now: float | None = None) -> bool:
        """Dead-letter an admitted task at once, whatever its retries (a malformed message, or a failure
        retrying cannot fix). True when done; False when the lease was no longer held (already reaped)."""
        task_id = str(json.loads(raw_message).get("task_id", ""))
        return self._fail(source, task_id, None, raw_message, reason, None, now, force_dead=True)

    @redis_storage_errors()
    def _fail(
        self, source: str, task_id: str, message: TaskMessage | None, original_json: str, reason: str,
        retry_after: float | None, now: float | None, force_dead: bool = False,
    ) -> bool:
        attempt = message.attempt if message is not None else 0
        next_attempt = 2**31 if force_dead else attempt + 1
        retry_json = message.model_copy(update={"attempt": attempt + 1}).to_json() if message else original_json
        host = host_of(message.url) if message is not None else ""
        delay = self.retry_policy.delay(attempt, retry_after)

        def build(pipeline: ScriptPipeline) -> None:
            pipeline.call("fail", source, task_id=task_id, next_attempt=next_attempt, retry_message=retry_json,
                          original_message=original_json, reason=reason, delay_seconds=delay,
                          now=_now_argument(now), host=host, pause_host_seconds=retry_after or 0)
            wake_distributors(pipeline.pipeline, source)

        return self.scripts.run_pipeline(build)[0].outcome == "dead"

    @redis_storage_errors()
    def reap(self, sources: Iterable[str] | None = None, now: float | None = None) -> ReapResult:
        """Expired leases of every (or the given) source back to intake or to dead letters; one round trip."""
        names = sorted(self.registered_sources() if sources is None else sources)
        if not names:
            return ReapResult(0, {})

        def build(pipeline: ScriptPipeline) -> None:
            for name in names:
                pipeline.call("reap", name, now=_now_argument(now), limit=self.settings.reap_batch_size)
            wake_distributors(pipeline.pipeline, "reap")

        replies = self.scripts.run_pipeline(build)[: len(names)]
        reaped = sum(reply.reaped for reply in replies)
        dead = {name: reply.dead_entries for name, reply in zip(names, replies, strict=True) if reply.dead_entries}
        return ReapResult(reaped, dead)

    # -- Retry-After -------------------------------------------------------------------------------
    @redis_storage_errors()
    def pause_source(self, source: str, seconds: float, now: float | None = None) -> float:
        """No task of ``source`` is admitted for ``seconds`` (a 429/503 Retry-After for the whole site)."""
        return self.scripts.call("pause", source, {"paused": SourceKeys(source).paused_until},
                                 seconds=float(seconds), now=_now_argument(now), host="").paused_until

    @redis_storage_errors()
    def pause_host(self, source: str, host: str, seconds: float, now: float | None = None) -> float:
        """No task of ``source`` on ``host`` (as :func:`host_of` gives it) is admitted for ``seconds``."""
        return self.scripts.call("pause", source, {"paused": SourceKeys(source).host_paused},
                                 seconds=float(seconds), now=_now_argument(now), host=host.lower()).paused_until

    # -- numbers -----------------------------------------------------------------------------------
    @redis_storage_errors()
    def registered_sources(self) -> list[str]:
        return sorted(text(name) for name in self.redis.smembers(SOURCES_INDEX))

    @redis_storage_errors()
    def stats(self, sources: list[str]) -> dict[str, SourceStats]:
        """Pending, delayed, active, admitted in the window, done, failed, dead of each source: one round trip."""
        if not sources:
            return {}

        def build(pipeline: ScriptPipeline) -> None:
            for name in sources:
                pipeline.call("stats", name, window_seconds=self.settings.rate_window_seconds)

        replies = self.scripts.run_pipeline(build)
        return {
            name: SourceStats(
                pending=reply.pending, delayed=reply.delayed, active=reply.active,
                admitted_last_minute=reply.admitted_in_window, done=reply.done, failed=reply.failed,
                dead=reply.dead_letters, admitted=reply.admitted, dead_total=reply.dead,
            )
            for name, reply in zip(sources, replies, strict=True)
        }

    def stats_all(self) -> dict[str, SourceStats]:
        """:meth:`stats` of every registered source (two round trips)."""
        return self.stats(self.registered_sources())

    @redis_storage_errors()
    def count_outcomes(self, source: str, outcomes: Mapping[str, int]) -> None:
        """Add to the source's per-outcome counters (``outcome:<name>`` in its counters hash)."""
        if not outcomes:
            return
        pipeline = self.redis.pipeline(transaction=False)
        for name, amount in outcomes.items():
            pipeline.hincrby(SourceKeys(source).counters, f"outcome:{name}", int(amount))
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
