"""A host that cannot be reached is paused for every worker: a circuit breaker per (source, host) in Redis.

One source over thousands of sites meets hosts that are gone (connection refused, DNS failing, connect
timeouts) and hosts that accept a connection but never answer. Retrying each of their tasks with backoff spends
every task's retries and holds a ``max_active`` unit per attempt for the length of a timeout. So each batch
reports, per host, its ``host_unreachable`` pages and its pages that got any response (one
``lua/host_breaker.lua`` call per such host): ``host_breaker_failures`` unreachable pages in a row open the
breaker, which pauses the host at admission (the distributor's host pause, as Retry-After does) and defers the
host's failed tasks past the pause without spending a retry. After the pause the next task is the probe: a
response closes the breaker, a failure opens it again for twice as long. Past ``host_breaker_deferrals``
openings in a row the tasks spend retries as any failure, so a host gone for good ends in dead letters.
The count lives in Redis (Redis TIME is the clock), so every worker fetching the host sees one breaker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from harvester.errors import StorageError, redis_storage_errors
from harvester.redis_scripts import ScriptPipeline, Scripts
from harvester.settings import HarvesterSettings
from harvester.workers.scripts import HOST_BREAKER

__all__ = ["BreakerVerdict", "HostBreaker"]

log = logging.getLogger(__name__)
FAILING_HOSTS_KEPT = 100_000  # hosts this process saw fail, per source (bounded memory over a broad crawl)


@dataclass(frozen=True, slots=True)
class BreakerVerdict:
    """A host's breaker after one batch: ``closed``, ``opened`` (by this batch) or ``open`` (already), the seconds
    it stays open, and its openings in a row."""

    host: str
    state: str
    open_seconds: float
    openings: int

    @property
    def is_open(self) -> bool:
        return self.state in ("opened", "open") and self.open_seconds > 0


class HostBreaker:
    """The per-host circuit breaker (see the module docstring)."""

    def __init__(self, client: redis.Redis, threshold: int, pause_seconds: float, max_pause_seconds: float,
                 deferrals: int) -> None:
        self.client = client
        self.threshold = threshold
        self.pause_seconds = pause_seconds
        self.max_pause_seconds = max_pause_seconds
        self.deferrals = deferrals
        self.scripts = Scripts(client, [HOST_BREAKER])
        self._failing: dict[str, set[str]] = {}  # source -> hosts this process saw unreachable (not since reached)

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, client: redis.Redis) -> HostBreaker:
        return cls(client, settings.host_breaker_failures, settings.host_breaker_pause_seconds,
                   settings.host_pause_max_seconds, settings.host_breaker_deferrals)

    @redis_storage_errors()
    def record(self, source: str, pages: dict[str, tuple[int, int]]) -> dict[str, BreakerVerdict]:
        """Each host's (unreachable, reached) pages of one batch: one atomic call per host, all in one round trip."""
        hosts = list(pages)

        def build(pipeline: ScriptPipeline) -> None:
            for host in hosts:
                unreachable, reached = pages[host]
                pipeline.call("host_breaker", source, host=host, unreachable=unreachable, reached=reached,
                              threshold=self.threshold, pause_seconds=self.pause_seconds,
                              max_pause_seconds=self.max_pause_seconds, keep_seconds=self.max_pause_seconds * 2)

        replies = self.scripts.run_pipeline(build)
        return {host: BreakerVerdict(host, reply.state, reply.open_seconds, reply.openings)
                for host, reply in zip(hosts, replies, strict=True)}

    def record_all(self, source: str, pages: dict[str, tuple[int, int]]) -> dict[str, BreakerVerdict]:
        """Each host's (unreachable, reached) pages. A host with only reached pages costs nothing unless this
        process saw it fail (the common case: a batch of a healthy web makes no call); a success another worker
        sees closes the breaker for it, and at worst this one's next failure opens it a page early. A Redis fault
        loses one batch's say (its tasks retry as any failure), never fails the batch."""
        failing = self._failing.setdefault(source, set())
        asked = {host: counts for host, counts in pages.items() if counts[0] or host in failing}
        if not asked:
            return {}
        try:
            verdicts = self.record(source, asked)
        except StorageError as error:
            log.warning("%s: the breakers of %d hosts could not be recorded: %s", source, len(asked), error)
            return {}
        for host, (unreachable, reached) in asked.items():
            if reached:
                failing.discard(host)
            elif unreachable:
                failing.add(host)
        if len(failing) > FAILING_HOSTS_KEPT:
            failing.clear()
        return verdicts

    def defers(self, verdict: BreakerVerdict) -> bool:
        """Whether the host's failed tasks wait out the pause without spending a retry."""
        return verdict.is_open and verdict.openings <= self.deferrals
