"""A block slows its host down, for every worker: the host's request rate adapts to the blocks it sees.

Scrapy's AutoThrottle adapts a delay to latency; a WAF that challenges past N requests a minute says nothing of
latency, only blocks. So each batch reports, per host, its block pages and its clean pages (one
``lua/host_throttle.lua`` call): a block halves the host's rate (the first from what the source really started in
its rate window), each clean page raises it a little (:data:`RAISE_PER_CLEAN_PAGE`), quiet time doubles it every
``block_recovery_seconds`` since its last change (a run that ended slowed does not start the next day's slowed),
and back at the source's own limit the host is no longer slowed. The rate lives in Redis
(``SourceKeys.host_throttles``), so every worker fetching the host slows down together;
:class:`~harvester.workers.host_rate.HostRateGate` reads it (cached for :data:`REFRESH_SECONDS`) and holds each
request start to it, never above the source's limits. Repeated blocks within ``block_window_seconds`` also pause
the host at admission (``block_pause_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import redis

from harvester.config import SourceConfig
from harvester.errors import StorageError, redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import Scripts
from harvester.settings import HarvesterSettings
from harvester.workers.scripts import HOST_THROTTLE

log = logging.getLogger(__name__)
RAISE_PER_CLEAN_PAGE = 1.02  # about 35 clean pages double the rate again: slower up than down, as AIMD does
FLOOR_PER_MINUTE = 1.0  # a host slowed to this still gets a request a minute, so it can show it relented
REFRESH_SECONDS = 1.0  # how stale a worker's copy of the slowed hosts may be


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """What one batch's pages did to a host: its rate now (None: not slowed) and whether to pause it."""

    host: str
    rate_per_minute: float | None
    blocks_in_window: int
    pause: bool


@dataclass
class _Cached:
    read_at: float = 0.0
    rates: dict[str, float] = field(default_factory=dict)


def ceiling_of(source: SourceConfig) -> int:
    """The source's own limit for one host: a slowed host is never raised above it."""
    return source.rate_limit.per_host_per_minute or source.rate_limit.per_minute


class HostThrottle:
    """The adaptive per-host rate (see the module docstring)."""

    def __init__(self, client: redis.Redis, window_seconds: float, pause_after: int, pause_seconds: float,
                 rate_window_seconds: float = 60.0, recovery_seconds: float = 300.0) -> None:
        self.client = client
        self.recovery_seconds = recovery_seconds  # quiet time that doubles a slowed rate
        self.window_seconds = window_seconds
        self.rate_window_seconds = rate_window_seconds  # the window "per minute" is counted over
        self.pause_after = pause_after
        self.pause_seconds = pause_seconds
        self.scripts = Scripts(client, [HOST_THROTTLE])
        self._cache: dict[str, _Cached] = {}

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, client: redis.Redis) -> HostThrottle:
        return cls(client, settings.block_window_seconds, settings.block_pause_after, settings.block_pause_seconds,
                   settings.rate_window_seconds + settings.rate_window_margin_seconds, settings.block_recovery_seconds)

    @redis_storage_errors()
    def record(self, source: SourceConfig, host: str, blocked: int, clean: int) -> HostVerdict:
        """One batch's block and clean pages of ``host``: one atomic call."""
        keys = SourceKeys(source.name)
        reply = self.scripts.call(
            "host_throttle", source.name, {"host_blocks": keys.host_blocks(host)}, host=host, blocked=blocked,
            clean=clean, ceiling_per_minute=ceiling_of(source), floor_per_minute=FLOOR_PER_MINUTE,
            raise_factor=RAISE_PER_CLEAN_PAGE, window_seconds=self.window_seconds, pause_after=self.pause_after,
            rate_window_seconds=self.rate_window_seconds, recovery_seconds=self.recovery_seconds)
        return HostVerdict(host, reply.rate_per_minute or None, reply.blocks_in_window, reply.pause)

    def record_all(self, source: SourceConfig, pages: dict[str, tuple[int, int]]) -> list[HostVerdict]:
        """Each host's (blocked, clean) pages. A host with only clean pages that this worker's copy says is not
        slowed costs no call (the common case). A Redis fault loses one batch's say, never fails the batch."""
        verdicts = []
        for host, (blocked, clean) in pages.items():
            if not blocked and self.known_rate(source.name, host) is None:
                continue
            try:
                verdicts.append(self.record(source, host, blocked, clean))
            except StorageError as error:
                log.warning("%s: the block figures of host %s could not be recorded: %s", source.name, host, error)
        return verdicts

    def known_rate(self, source: str, host: str) -> float | None:
        """:meth:`rate` for a caller off the event loop (a batch settling its pages)."""
        cached = self._cache.get(source)
        if cached is None or time.monotonic() - cached.read_at >= REFRESH_SECONDS:
            cached = self._cache[source] = _Cached(time.monotonic(), cached.rates if cached is not None else {})
            try:
                cached.rates = self._read(source)
            except StorageError as error:  # the last copy holds until Redis answers again
                log.warning("slowed hosts of %s unavailable: %s", source, error)
        return cached.rates.get(host)

    async def rate(self, source: str, host: str) -> float | None:
        """The host's slowed rate in requests per minute, None when it is not slowed: read from Redis at most
        every :data:`REFRESH_SECONDS` per source (one HGETALL), else this worker's copy."""
        cached = self._cache.get(source)
        if cached is None or time.monotonic() - cached.read_at >= REFRESH_SECONDS:
            return await asyncio.to_thread(self.known_rate, source, host)
        return cached.rates.get(host)

    @redis_storage_errors()
    def _read(self, source: str) -> dict[str, float]:
        """Each slowed host's rate now: the stored ``rate:time of its last change``, recovered by the quiet time
        since, on the Redis server's clock (one round trip). The gate never goes above the source's limits, so a
        rate recovered past them simply stops slowing; the next record of the host removes it."""
        pipeline = self.client.pipeline(transaction=False)
        pipeline.hgetall(SourceKeys(source).host_throttles)
        pipeline.time()
        raw, (seconds, microseconds) = pipeline.execute()
        now = seconds + microseconds / 1_000_000
        rates: dict[str, float] = {}
        for key, value in raw.items():
            rate, _, changed = (value.decode() if isinstance(value, bytes) else value).partition(":")
            quiet = max(0.0, now - float(changed)) if changed else 0.0
            recovery = 2 ** (quiet / self.recovery_seconds) if self.recovery_seconds > 0 else 1.0
            rates[key.decode() if isinstance(key, bytes) else key] = float(rate) * recovery
        return rates
