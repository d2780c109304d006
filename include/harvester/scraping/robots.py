"""robots.txt, parsed by protego: fetched once per host, cached in Redis (at most 24 h), honoured by default.

A source with ``robots: obey`` (the default) never fetches a URL its host's robots.txt disallows for
our User-Agent: the fetcher skips it (``robots_disallowed``, dead-lettered with the rule's reason),
the link follower and the planner drop such URLs before they become tasks (counted). ``Crawl-delay``
and ``Request-rate`` become the host's minimum interval between request starts
(:class:`harvester.workers.host_rate.HostRateGate`).

As RFC 9309 says, a robots.txt that answers 4xx (none) allows everything. One that cannot be fetched
(a connection error, a 5xx) also allows everything here, but is cached only
:data:`UNREACHABLE_CACHE_SECONDS`, so the rules apply as soon as the file can be read again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from protego import Protego

from harvester.redis_keys import robots_key

if TYPE_CHECKING:
    import redis

    from harvester.settings import HarvesterSettings

log = logging.getLogger(__name__)

ROBOTS_SIZE_CAP_BYTES = 512 * 1024  # Google reads the first 500 KiB
UNREACHABLE_CACHE_SECONDS = 300.0
MEMORY_SECONDS = 60.0  # parsed rules are kept in the process this long before Redis is asked again
FetchRobots = Callable[[str], Awaitable[tuple[int | None, str]]]  # robots URL -> (status or None, text)


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL, lower-cased: robots.txt applies per origin."""
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.netloc.rsplit('@', 1)[-1]).lower()}"


def user_agent_token(user_agent: str) -> str:
    """The product token robots.txt groups match: ``Harvester/0.1.0 (+url)`` → ``Harvester``."""
    return (user_agent.split("/", 1)[0].split() or ["*"])[0]


class RobotsRules:
    """One origin's robots.txt (empty text: everything allowed), parsed once."""

    def __init__(self, origin: str, text: str = "", status: int | None = None) -> None:
        self.origin = origin
        self.text = text
        self.status = status
        self._parser = Protego.parse(text) if text else None

    def allowed(self, url: str, user_agent: str) -> bool:
        parser = self._parser
        return True if parser is None else bool(parser.can_fetch(url, user_agent_token(user_agent)))

    def min_interval_seconds(self, user_agent: str) -> float:
        """Crawl-delay, or Request-rate's seconds per request, whichever is slower (0: neither)."""
        parser = self._parser
        if parser is None:
            return 0.0
        token = user_agent_token(user_agent)
        interval = float(parser.crawl_delay(token) or 0.0)
        rate = parser.request_rate(token)
        if rate is not None and rate.requests:
            interval = max(interval, rate.seconds / rate.requests)
        return min(interval, 3600.0)


def robots_url(origin: str) -> str:
    return f"{origin}/robots.txt"


class RobotsCache:
    """robots.txt per origin: in this process for a minute, in Redis for ``cache_seconds`` (≤ 24 h),
    fetched with ``fetch`` (the fetcher's guarded, capped GET) when neither has it. ``client`` None
    (``harvester try``) keeps it in this process only."""

    def __init__(self, client: redis.Redis | None, cache_seconds: float) -> None:
        self.client = client
        self.cache_seconds = min(cache_seconds, 24 * 3600.0)
        self._memory: dict[str, tuple[float, RobotsRules]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, client: redis.Redis | None) -> RobotsCache:
        return cls(client, settings.robots_cache_seconds)

    def cached(self, url: str) -> RobotsRules | None:
        """The rules of ``url``'s origin if this process or Redis has them (no fetching; sync callers)."""
        origin = origin_of(url)
        if (rules := self.remembered(origin)) is not None:
            return rules
        if self.client is None:
            return None
        try:
            raw = self.client.get(robots_key(origin))
        except Exception as error:  # Redis down: the fetch-time check still applies
            log.warning("reading robots.txt of %s from Redis failed: %s", origin, error)
            return None
        if raw is None:
            return None
        data = json.loads(raw)
        rules = RobotsRules(origin, data.get("text", ""), data.get("status"))
        self._remember(rules)
        return rules

    def remembered(self, origin: str) -> RobotsRules | None:
        """The origin's rules if this process read them within :data:`MEMORY_SECONDS` (no I/O)."""
        remembered = self._memory.get(origin)
        if remembered is not None and remembered[0] > time.monotonic():
            return remembered[1]
        return None

    def _remember(self, rules: RobotsRules) -> None:
        if len(self._memory) > 10_000:
            self._memory.clear()
        self._memory[rules.origin] = (time.monotonic() + MEMORY_SECONDS, rules)

    async def rules(self, url: str, fetch: FetchRobots) -> RobotsRules:
        """The rules of ``url``'s origin, fetched at most once at a time per origin in this process. Rules
        this process holds are answered at once: no thread hop, no Redis round trip per request."""
        origin = origin_of(url)
        if (rules := self.remembered(origin)) is not None:
            return rules
        if (rules := await asyncio.to_thread(self.cached, url)) is not None:
            return rules
        lock = self._locks.setdefault(origin, asyncio.Lock())
        async with lock:
            if (rules := self.remembered(origin)) is not None:
                return rules
            status, text = await fetch(robots_url(origin))
            if status is not None and 200 <= status < 300:
                rules, ttl = RobotsRules(origin, text, status), self.cache_seconds
            elif status is not None and 400 <= status < 500:
                rules, ttl = RobotsRules(origin, "", status), self.cache_seconds
            else:
                rules, ttl = RobotsRules(origin, "", status), min(self.cache_seconds, UNREACHABLE_CACHE_SECONDS)
            self._remember(rules)
            if self.client is not None:
                payload = json.dumps({"status": status, "text": rules.text, "fetched_at": time.time()})
                try:
                    await asyncio.to_thread(self.client.set, robots_key(origin), payload, ex=max(1, int(ttl)))
                except Exception as error:  # Redis down: this process still remembers the rules
                    log.warning("caching robots.txt of %s failed: %s", origin, error)
        self._locks.pop(origin, None)
        return rules

    def filter_allowed(self, urls: list[str], user_agent: str) -> tuple[list[str], int]:
        """``urls`` without those a cached robots.txt disallows, and how many were dropped. Origins
        whose robots.txt is not cached yet pass: the fetch-time check still applies to them."""
        kept: list[str] = []
        dropped = 0
        for url in urls:
            rules = self.cached(url)
            if rules is not None and not rules.allowed(url, user_agent):
                dropped += 1
            else:
                kept.append(url)
        return kept, dropped
