"""Per-host politeness held at FETCH time: ``per_host_per_minute``, ``per_host_max_active`` (requests in
flight at a host) and the robots.txt crawl delay, one atomic ``lua/host_fetch.lua`` call per request start.

Admission (``admit.lua``) decides which tasks go to workers; the site only sees requests, and a
retry, a slow batch or two workers on the same host start requests at times admission cannot know.
So every request of the HTTP fetcher first takes a token for its host here, against one rolling
window shared by all workers (Redis TIME is the clock). A request that must wait sleeps on the
event loop (``asyncio.sleep``), never blocking its batch's other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
from dataclasses import dataclass, replace

import redis

from harvester.distributor import host_of
from harvester.errors import StorageError, redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import Scripts
from harvester.scraping import HostLimits, HostRateTimeout
from harvester.settings import HarvesterSettings
from harvester.workers.host_throttle import HostThrottle
from harvester.workers.scripts import HOST_FETCH

__all__ = ["HostLimits", "HostRateGate", "HostRateTimeout", "HostToken"]


@dataclass(frozen=True, slots=True)
class HostToken:
    source: str
    host: str
    token: str
    holds_in_flight: bool  # the token also holds one of the host's in-flight places (released after the request)


class HostRateGate:
    """Tokens for request starts per source and host (see the module docstring)."""

    def __init__(self, client: redis.Redis, window_seconds: float, max_wait_seconds: float,
                 hold_seconds: float, throttle: HostThrottle | None = None) -> None:
        self.client = client
        self.window_seconds = window_seconds
        self.max_wait_seconds = max_wait_seconds
        self.hold_seconds = hold_seconds
        self.throttle = throttle  # hosts slowed down after blocks: their rate holds here too
        self.scripts = Scripts(client, [HOST_FETCH])  # the one script the gate calls

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, client: redis.Redis) -> HostRateGate:
        """An in-flight place is held at most a lease long (a worker that died frees it then). A request reaches
        the site a little after its token, whatever sends it: the host's window is widened by
        ``rate_window_margin_seconds`` as per_minute's is, so the site's window never sees more."""
        return cls(client, settings.rate_window_seconds + settings.rate_window_margin_seconds,
                   settings.host_rate_max_wait_seconds, settings.lease_seconds,
                   HostThrottle.from_settings(settings, client))

    @redis_storage_errors()
    def try_acquire(self, source: str, host: str, limits: HostLimits, token: str) -> float:
        """One Lua call: 0 when the token was taken, else the seconds to wait before asking again."""
        keys = SourceKeys(source)
        reply = self.scripts.call(
            "host_fetch", source,
            {"host_fetch_window": keys.host_fetch_window(host), "host_fetch_active": keys.host_fetch_active(host)},
            token=token, per_minute=limits.per_minute, window_seconds=self.window_seconds,
            min_interval_seconds=limits.min_interval_seconds, max_in_flight=limits.max_in_flight,
            hold_seconds=self.hold_seconds)
        return reply.wait_seconds

    async def acquire(self, source: str, url: str, limits: HostLimits) -> HostToken | None:
        """Wait (on the loop) for a token of ``url``'s host; None when the host is not limited. Raises
        :class:`HostRateTimeout` past ``max_wait_seconds``. The Redis call itself is one short round trip.
        A host slowed down after blocks is limited to its slowed rate (never above the source's own)."""
        host = host_of(url)
        limits = await self.slowed(source, host, limits)
        if not limits.limited:
            return None
        token = secrets.token_hex(8)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_seconds
        while True:
            wait = await asyncio.to_thread(self.try_acquire, source, host, limits, token)
            if wait <= 0:
                return HostToken(source, host, token, limits.max_in_flight > 0)
            if loop.time() + wait > deadline:
                raise HostRateTimeout(f"host {host} rate: no request slot within {self.max_wait_seconds:g}s")
            await asyncio.sleep(wait)

    async def slowed(self, source: str, host: str, limits: HostLimits) -> HostLimits:
        """``limits`` with the host's slowed rate when blocks slowed it (:mod:`harvester.workers.host_throttle`)."""
        rate = await self.throttle.rate(source, host) if self.throttle is not None else None
        if rate is None:
            return limits
        slowed = max(1, math.floor(rate))
        return replace(limits, per_minute=min(limits.per_minute, slowed) if limits.per_minute else slowed)

    async def release(self, token: HostToken | None) -> None:
        """The request ended: free its in-flight place (its start stays in the rolling window)."""
        if token is None or not token.holds_in_flight:
            return
        with contextlib.suppress(StorageError):  # else the token expires after hold_seconds
            await asyncio.to_thread(self._free, token)

    @redis_storage_errors()
    def _free(self, token: HostToken) -> None:
        self.client.zrem(SourceKeys(token.source).host_fetch_active(token.host), token.token)
