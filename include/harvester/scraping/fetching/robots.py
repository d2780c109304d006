"""robots.txt: fetched once per host, cached in Redis (at most 24 h), honoured by default.

A source with ``robots: obey`` (the default) never fetches a URL its host's robots.txt disallows for
our User-Agent: the fetcher skips it (``robots_disallowed``, dead-lettered with the rule's reason),
the link follower and the planner drop such URLs before they become tasks (counted). ``Crawl-delay``
and ``Request-rate`` become the host's minimum interval between request starts
(:class:`harvester.workers.host_rate.HostRateGate`). Allow and Disallow are matched as Google's reference parser
matches them (:mod:`harvester.scraping.fetching.robots_matching`); protego reads Crawl-delay and Request-rate.

Errors as RFC 9309 section 2.3.1 reads them: a 4xx other than 429 means there is no robots.txt (everything
allowed, cached as long as a file); a 429, a 5xx or no answer at all (a network error, a refused address)
means complete disallow. Then the last copy that answered 2xx is used while it is younger than
``robots_last_good_seconds`` (30 days, kept in Redis apart from the daily cache); without one the page is
not fetched (``robots_unavailable``, retried later), and the file is asked again after
:data:`UNREACHABLE_CACHE_SECONDS`.

Bounded (a hostile site writes it): one file is read up to :data:`ROBOTS_SIZE_CAP_BYTES`, its first ``robots_max_rules``
Allow/Disallow rules are kept (later ones dropped), and a rule keeps at most ``robots_max_wildcards_per_rule``
wildcards: a Disallow is cut after its last kept ``*`` (it then disallows more, never less), an Allow with
more is dropped. Both are counted (``robots_rules_dropped``, ``robots_rules_cut``) and logged.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from protego import Protego

from harvester.redis_keys import robots_key, robots_last_good_key
from harvester.scraping.fetching.robots_matching import USER_AGENT_KEYS, GoogleRobotsMatcher

if TYPE_CHECKING:
    import redis

    from harvester.settings import HarvesterSettings

log = logging.getLogger(__name__)

ROBOTS_SIZE_CAP_BYTES = 512 * 1024  # Google reads the first 500 KiB
UNREACHABLE_CACHE_SECONDS = 300.0
MEMORY_SECONDS = 60.0  # parsed rules are kept in the process this long before Redis is asked again
# robots URL -> (status, text), or (None, what failed) when no response came
FetchRobots = Callable[[str], Awaitable[tuple[int | None, str]]]


_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL, lower-cased: robots.txt applies per origin."""
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.netloc.rsplit('@', 1)[-1]).lower()}"


def user_agent_token(user_agent: str) -> str:
    """The product token robots.txt groups match: ``Harvester/0.1.0 (+url)`` → ``Harvester``. A name that is
    no product token (``Foo Bar``: RFC 9309 allows letters, ``_`` and ``-``) is matched by the ``*`` group
    only, as Google's parser does (protego matched it to the group ``Foo``)."""
    product = user_agent.split("/", 1)[0].strip()
    return product if _PRODUCT_TOKEN.fullmatch(product) else "*"


RULE_DIRECTIVES = ("allow", "disallow")
MAX_LINE_BYTES = 2083 * 8 - 1  # Google's parser reads this much of a line (RFC 9309 lets a parser cut lines)
# the keys a group may hold without ending it: Google's and RFC 9309's, with the misspellings Google accepts,
# and the ones whose values we read (Crawl-delay, Request-rate); any other line is dropped, as Google ignores
# it, so that "Foo: bar" between two User-agent lines no longer splits their group
KNOWN_KEYS = USER_AGENT_KEYS | frozenset({
    "allow", "disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw", "sitemap", "site-map",
    "sitemaps", "crawl-delay", "crawl delay", "request-rate", "request rate", "host", "visit-time", "visit time"})


def as_google_reads(text: str) -> str:
    """``text`` as Google's parser (the reference RFC 9309 was written from) reads it, in the terms protego
    parses: each line cut at :data:`MAX_LINE_BYTES`, a User-agent value cut to its product token (the
    letters, ``_`` and ``-`` it starts with: ``FOO BAR`` names ``FOO``, matched without case), and lines
    of keys nobody knows dropped instead of ending the group they stand in."""
    kept: list[str] = []
    for line in text.splitlines():
        if len(line) > MAX_LINE_BYTES // 4 and len(encoded := line.encode()) > MAX_LINE_BYTES:
            line = encoded[:MAX_LINE_BYTES].decode(errors="ignore")
        content = line.split("#", 1)[0]
        key, colon, value = content.partition(":")
        key = " ".join(key.split()).lower()
        if not colon or not key:
            kept.append(line)
            continue
        if key not in KNOWN_KEYS:
            continue
        if key in USER_AGENT_KEYS:
            value = value.strip()
            token = "*" if value.startswith("*") else (match.group() if (match := _PRODUCT_TOKEN.match(value)) else "")
            line = f"User-agent: {token}"
        kept.append(line)
    return "\n".join(kept)


def bounded_robots_text(text: str, max_rules: int | None, max_wildcards: int | None) -> tuple[str, int, int]:
    """``text`` with at most ``max_rules`` rules and ``max_wildcards`` wildcards per rule (see the module
    docstring), and how many rules were dropped and cut. Linear in the text."""
    if max_rules is None and max_wildcards is None:
        return text, 0, 0
    kept: list[str] = []
    rules = dropped = cut = 0
    for line in text.splitlines():
        directive, colon, value = line.partition(":")
        name = directive.strip().lower()
        if not colon or name not in RULE_DIRECTIVES:
            kept.append(line)
            continue
        rules += 1
        if max_rules is not None and rules > max_rules:
            dropped += 1
            continue
        pattern = value.split("#", 1)[0].strip()
        if max_wildcards is not None and pattern.count("*") > max_wildcards:
            if name == "allow":
                dropped += 1
                continue
            position = -1
            for _ in range(max_wildcards):
                position = pattern.index("*", position + 1)
            line = f"{directive}: {pattern[:position + 1]}"
            cut += 1
        kept.append(line)
    return "\n".join(kept), dropped, cut


class RobotsRules:
    """One origin's robots.txt (empty text: everything allowed), parsed once. ``unavailable``: the file
    answered 429, 5xx or nothing and no good copy was at hand (complete disallow, RFC 9309)."""

    def __init__(self, origin: str, text: str = "", status: int | None = None, *, max_rules: int | None = None,
                 max_wildcards: int | None = None, unavailable: bool = False, fetched_at: float | None = None,
                 failure: str = "") -> None:
        self.origin = origin
        self.status = status
        self.unavailable = unavailable
        self.failure = failure  # what failed when the file could not be fetched at all
        self.fetched_at = time.time() if fetched_at is None else fetched_at
        self.text, self.dropped_rules, self.cut_rules = bounded_robots_text(as_google_reads(text), max_rules,
                                                                           max_wildcards)
        self._parser = Protego.parse(self.text) if self.text else None  # Crawl-delay and Request-rate
        self._matcher = GoogleRobotsMatcher(self.text)  # Allow and Disallow, as Google matches them

    def allowed(self, url: str, user_agent: str) -> bool:
        if self.unavailable:
            return False
        return self._matcher.allowed(url, user_agent_token(user_agent))

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
    (``harvester try``) keeps it in this process only. ``outcomes`` counts the rules bounded away and the
    files found unavailable (the fetcher adds them to the batch's outcomes)."""

    def __init__(self, client: redis.Redis | None, cache_seconds: float, *, max_rules: int | None = None,
                 max_wildcards: int | None = None, last_good_seconds: float = 30 * 86_400.0) -> None:
        self.client = client
        self.cache_seconds = min(cache_seconds, 24 * 3600.0)
        self.max_rules = max_rules
        self.max_wildcards = max_wildcards
        self.last_good_seconds = last_good_seconds
        self.outcomes: Counter[str] = Counter()
        self._memory: dict[str, tuple[float, RobotsRules]] = {}
        self._last_good: dict[str, RobotsRules] = {}
        self._lookups: dict[str, asyncio.Future[RobotsRules]] = {}  # origin: the one lookup in flight

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, client: redis.Redis | None) -> RobotsCache:
        return cls(client, settings.robots_cache_seconds, max_rules=settings.robots_max_rules,
                   max_wildcards=settings.robots_max_wildcards_per_rule,
                   last_good_seconds=settings.robots_last_good_seconds)

    def take_outcomes(self) -> Counter[str]:
        """What was counted since the last call, for the batch that ends now; the count starts again, so a
        worker's long-lived cache holds nothing a later batch would report as its own."""
        taken, self.outcomes = self.outcomes, Counter()
        return taken

    def _rules(self, origin: str, data: dict) -> RobotsRules:
        return RobotsRules(origin, data.get("text", ""), data.get("status"), max_rules=self.max_rules,
                           max_wildcards=self.max_wildcards, unavailable=bool(data.get("unavailable")),
                           fetched_at=data.get("fetched_at"), failure=data.get("failure", ""))

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
        rules = self._rules(origin, json.loads(raw))
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

    def last_good(self, origin: str) -> RobotsRules | None:
        """The last copy of the origin's robots.txt that answered 2xx, while younger than ``last_good_seconds``."""
        rules = self._last_good.get(origin)
        if rules is None and self.client is not None:
            try:
                raw = self.client.get(robots_last_good_key(origin))
            except Exception as error:  # Redis down: no good copy then, complete disallow
                log.warning("reading the last good robots.txt of %s from Redis failed: %s", origin, error)
                raw = None
            rules = self._rules(origin, json.loads(raw)) if raw is not None else None
        if rules is None or time.time() - rules.fetched_at > self.last_good_seconds:
            return None
        return rules

    async def rules(self, url: str, fetch: FetchRobots) -> RobotsRules:
        """The rules of ``url``'s origin, looked up at most once at a time per origin in this process: every
        request that asks meanwhile awaits that one lookup and all of them wake in the same loop turn (so a
        batch's pages still reach their rate permit together). Rules this process holds are answered at
        once: no thread hop, no Redis round trip per request. A lookup that fails for its own request (its
        task no longer held) is not the others' answer: the next one looks up with its own ``fetch``."""
        origin = origin_of(url)
        while (rules := self.remembered(origin)) is None:
            lookup = self._lookups.get(origin)
            if lookup is None:
                lookup = self._lookups[origin] = asyncio.ensure_future(self._look_up(url, origin, fetch))
                lookup.add_done_callback(functools.partial(self._looked_up, origin))
                return await asyncio.shield(lookup)  # one caller's cancellation does not cancel the others'
            try:
                return await asyncio.shield(lookup)
            except asyncio.CancelledError:
                if not lookup.cancelled():
                    raise
            except Exception as error:  # the looking request's own failure: look again with this request's fetch
                log.debug("robots.txt lookup of %s failed for another request (%s): asking again", origin, error)
        return rules

    def _looked_up(self, origin: str, lookup: asyncio.Future[RobotsRules]) -> None:
        self._lookups.pop(origin, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved: a failure whose request went away is not reported as unobserved

    async def _look_up(self, url: str, origin: str, fetch: FetchRobots) -> RobotsRules:
        """Redis's copy if another process fetched it, else a fetch, remembered here and cached in Redis."""
        if (rules := await asyncio.to_thread(self.cached, url)) is not None:
            return rules
        status, text = await fetch(robots_url(origin))
        rules, ttl = await self._read(origin, status, text)
        self._remember(rules)
        if self.client is not None:
            payload = json.dumps({"status": status, "text": rules.text, "fetched_at": rules.fetched_at,
                                  "unavailable": rules.unavailable, "failure": rules.failure})
            try:
                await asyncio.to_thread(self.client.set, robots_key(origin), payload, ex=max(1, int(ttl)))
                if status is not None and 200 <= status < 300:
                    await asyncio.to_thread(self.client.set, robots_last_good_key(origin), payload,
                                            ex=max(1, int(self.last_good_seconds)))
            except Exception as error:  # Redis down: this process still remembers the rules
                log.warning("caching robots.txt of %s failed: %s", origin, error)
        return rules

    async def _read(self, origin: str, status: int | None, text: str) -> tuple[RobotsRules, float]:
        """The rules a fetch gave (RFC 9309 section 2.3.1) and how long to cache them."""
        if status is not None and 200 <= status < 300:
            rules = RobotsRules(origin, text, status, max_rules=self.max_rules, max_wildcards=self.max_wildcards)
            if rules.dropped_rules or rules.cut_rules:
                log.warning("robots.txt of %s: %d rules dropped and %d cut to their first %s wildcards", origin,
                            rules.dropped_rules, rules.cut_rules, self.max_wildcards)
                self.outcomes["robots_rules_dropped"] += rules.dropped_rules
                self.outcomes["robots_rules_cut"] += rules.cut_rules
            self._last_good[origin] = rules
            if len(self._last_good) > 10_000:
                self._last_good.clear()
            return rules, self.cache_seconds
        if status is not None and 400 <= status < 500 and status != 429:
            return RobotsRules(origin, "", status), self.cache_seconds  # no robots.txt: everything allowed
        ttl = min(self.cache_seconds, UNREACHABLE_CACHE_SECONDS)
        good = await asyncio.to_thread(self.last_good, origin)
        if good is not None:
            log.info("robots.txt of %s answered %s: its last good copy applies", origin, status or "nothing")
            return RobotsRules(origin, good.text, good.status, max_rules=self.max_rules,
                               max_wildcards=self.max_wildcards, fetched_at=good.fetched_at), ttl
        self.outcomes["robots_unavailable"] += 1
        return RobotsRules(origin, "", status, unavailable=True, failure=text if status is None else ""), ttl

    def filter_allowed(self, urls: list[str], user_agent: str) -> tuple[list[str], int]:
        """``urls`` without those a cached robots.txt disallows, and how many were dropped. Origins
        whose robots.txt is not cached yet (or is unavailable now) pass: the fetch-time check still applies.
        Each origin is looked up once per call (a miss is not remembered, so it was one Redis read per URL)."""
        kept: list[str] = []
        dropped = 0
        by_origin: dict[str, RobotsRules | None] = {}
        for url in urls:
            origin = origin_of(url)
            if origin not in by_origin:
                by_origin[origin] = self.cached(url)
            rules = by_origin[origin]
            if rules is not None and not rules.unavailable and not rules.allowed(url, user_agent):
                dropped += 1
            else:
                kept.append(url)
        return kept, dropped
