"""A country's proxy pool and each proxy's health, shared by every worker through Redis.

A pool is the country's proxy connections: ``proxy_<c>`` and then ``proxy_<c>_2``, ``proxy_<c>_3``, ... (as
environment ``AIRFLOW_CONN_PROXY_SG``, ``AIRFLOW_CONN_PROXY_SG_2``; the numbers need not be contiguous, the
pool is in numeric order). Each is an ordinary Airflow connection, so credentials stay where Airflow keeps
them and one proxy can be added, rotated or removed without touching the others.

Health (``PageSlotKeys.proxy_health``, the Lua scripts ``proxy_choose`` and ``proxy_report``, Redis TIME as
the clock): every connection the browser guard opens through a proxy reports how it went. ``FAILURES_ALLOWED``
consecutive connect or upstream failures take a proxy out for an exponential backoff with jitter
(``BACKOFF_BASE_SECONDS`` doubling up to ``BACKOFF_MAX_SECONDS``); once its time is over it is chosen again, and
that probe's success brings it back. A connection is tried through the pool's other proxies before it fails, so
a dead proxy costs a page nothing; only a pool with no living proxy ends a load as ``proxy_error``.

Bans (``PageSlotKeys.proxy_bans``, the Lua script ``proxy_ban``): a host that blocked us through one proxy (a 401,
403 or 429, or a block page) is banned from it for ``BAN_SECONDS``: the pool then offers that host its other proxies
first, so a ban of one exit address is answered by another exit, not by pausing the host. A session
(``harvester.scraping.fetching.sessions``) takes its proxy from the same order and is retired on the block.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from harvester.config import DIRECT_TIER
from harvester.errors import redis_storage_errors
from harvester.pageslots.proxies import Proxy, parse_proxy, proxy_environment_variable
from harvester.pageslots.proxy_tiers import ProxyTiers, tier_pool
from harvester.pageslots.scripts import page_slot_scripts
from harvester.redis_keys import PageSlotKeys
from harvester.redis_scripts import text
from harvester.scraping import NO_POOL_EXIT, AddressGuard, GuardProxy, SessionExit, UpstreamProxy

FAILURES_ALLOWED = 2  # consecutive failures before a proxy goes out (one failure can be the site's or a blip)
BACKOFF_BASE_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 600.0
BAN_SECONDS = 600.0  # a block through one exit: that host prefers the pool's other exits this long
KEYS = PageSlotKeys()


def proxy_pool(country: str, environ: Mapping[str, str] | None = None) -> list[Proxy]:
    """The country's proxies in pool order: ``proxy_<c>`` first, then ``proxy_<c>_<n>`` by ``n``."""
    environ = environ if environ is not None else os.environ
    first = proxy_environment_variable(country)
    numbered = re.compile(re.escape(first) + r"_(\d+)")
    members = [(1, first)] if first in environ else []
    members += [(int(match.group(1)), name) for name in environ if (match := numbered.fullmatch(name))]
    return [parse_proxy(country, environ[name], connection_id=name.removeprefix("AIRFLOW_CONN_").lower())
            for _, name in sorted(members)]


@dataclass(frozen=True)
class ProxyState:
    """One proxy's health as the pool's workers share it."""

    connection_id: str
    consecutive_failures: int
    out_until: float  # Redis server time (s); 0 when in
    requests: int
    errors: int
    bans: int = 0  # blocks a host answered through this proxy (each banned it from that host for a while)
    bytes: int = 0  # relayed both ways through it, every worker's guard proxies together

    def figures(self, now: float) -> dict[str, str | int]:
        """What the Harvester page and the metrics show of it (``state``: ``in``, or ``out`` while backed off)."""
        return {"proxy": self.connection_id, "state": "out" if self.out(now) else "in", "requests": self.requests,
                "errors": self.errors, "bans": self.bans, "bytes": self.bytes,
                "consecutive_failures": self.consecutive_failures}

    def out(self, now: float) -> bool:
        return self.out_until > now


class ProxyHealth:
    """The shared health of every pool (``choose`` the order to try, ``report`` each connection's outcome)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.scripts = page_slot_scripts(client)

    @redis_storage_errors()
    def choose(self, country: str, connection_ids: list[str], host: str = "") -> list[str]:
        """The order to try the pool in (for ``host``: the proxies it banned last)."""
        reply = self.scripts.call("proxy_choose", KEYS, self._keys(country), host=host, proxies=connection_ids)
        return list(reply.chosen)

    @redis_storage_errors()
    def ban(self, country: str, connection_id: str, host: str, connection_ids: list[str],
            seconds: float = BAN_SECONDS) -> int:
        """``host`` blocked us through ``connection_id``: it prefers the pool's other proxies for ``seconds``. The
        number of the pool's proxies it still welcomes (not banned, not out): 0 means rotation cannot help."""
        reply = self.scripts.call("proxy_ban", KEYS, self._keys(country), proxy=connection_id, host=host,
                                  ban_seconds=seconds, proxies=connection_ids)
        return int(reply.welcome)

    @staticmethod
    def _keys(country: str) -> dict[str, str]:
        return {"proxy_health": KEYS.proxy_health(country), "proxy_bans": KEYS.proxy_bans(country)}

    @redis_storage_errors()
    def report(self, country: str, connection_id: str, ok: bool) -> tuple[str, int, float]:
        reply = self.scripts.call("proxy_report", KEYS, {"proxy_health": KEYS.proxy_health(country)},
                                  proxy=connection_id, outcome="ok" if ok else "failure",
                                  failures_allowed=FAILURES_ALLOWED, base_seconds=BACKOFF_BASE_SECONDS,
                                  max_seconds=BACKOFF_MAX_SECONDS, jitter=random.random())
        return reply.state, reply.failures, reply.out_for

    def states(self, country: str) -> dict[str, ProxyState]:
        """Each proxy of the country that has reported, by connection id."""
        return pool_states(self.client, country)

    @redis_storage_errors()
    def carried(self, country: str, connection_id: str, amount: int) -> None:
        """Bytes a connection through the proxy relayed (counted when it ends)."""
        self.client.hincrby(KEYS.proxy_health(country), f"{connection_id}|bytes", amount)


@redis_storage_errors()
def pool_states(client: redis.Redis, country: str) -> dict[str, ProxyState]:
    """Each proxy of the country that has reported, by connection id."""
    fields = {text(name): text(value) for name, value in client.hgetall(KEYS.proxy_health(country)).items()}
    proxies = sorted({name.split("|", 1)[0] for name in fields if "|" in name})
    return {proxy: ProxyState(proxy, int(fields.get(f"{proxy}|failures", 0)),
                              float(fields.get(f"{proxy}|out_until", 0)), int(fields.get(f"{proxy}|requests", 0)),
                              int(fields.get(f"{proxy}|errors", 0)), int(fields.get(f"{proxy}|bans", 0)),
                              int(fields.get(f"{proxy}|bytes", 0)))
            for proxy in proxies}


def proxy_figures(client: redis.Redis) -> dict[str, list[dict[str, str | int]]]:
    """Every country's proxies as the page and the metrics show them, by country (Redis TIME tells who is out)."""
    prefix = KEYS.proxy_health("")
    with redis_storage_errors():
        countries = sorted(text(key).removeprefix(prefix) for key in client.scan_iter(match=prefix + "*"))
        seconds, microseconds = client.time()
        now = seconds + microseconds / 1e6
        return {country: [state.figures(now) for state in pool_states(client, country).values()]
                for country in countries}


class HealthTrackedPool:
    """The browser guard's way out for one country (``guard_proxy.UpstreamPool``): the pool's proxies in the
    order the shared health gives, each connection's outcome reported back. Redis is called off the loop."""

    def __init__(self, country: str, proxies: list[Proxy], health: ProxyHealth) -> None:
        if not proxies:
            raise ValueError(f"the proxy pool of {country} is empty")
        self.country, self.health = country, health
        self.upstreams = {proxy.connection_id: UpstreamProxy.from_server(proxy.server, proxy.username, proxy.password,
                                                                         name=proxy.connection_id)
                          for proxy in proxies}

    async def candidates(self, host: str = "") -> list[UpstreamProxy]:
        chosen = await asyncio.to_thread(self.health.choose, self.country, list(self.upstreams), host)
        return [self.upstreams[name] for name in chosen if name in self.upstreams]

    async def report(self, upstream: UpstreamProxy, ok: bool) -> None:
        await asyncio.to_thread(self.health.report, self.country, upstream.name, ok)

    async def carried(self, upstream: UpstreamProxy, amount: int) -> None:
        if amount:
            await asyncio.to_thread(self.health.carried, self.country, upstream.name, amount)

    async def ban(self, name: str, host: str) -> int:
        if name not in self.upstreams:
            return 0
        return await asyncio.to_thread(self.health.ban, self.country, name, host, list(self.upstreams))


class CountryExits:
    """A worker's ways out for HTTP sources with a ``country``: one local :class:`GuardProxy` per pool on the
    worker's loop, relaying through the pool with the shared health (the same guard, failover and ``proxy_error``
    as a browser's), so the address rules hold for the target and CONNECT carries https. A country with no proxy
    connection has no exit (its sources fetch directly, as before pools).

    The fetcher's sessions take their exits here (``harvester.scraping.fetching.sessions.ExitPool``): a session is
    bound to one proxy of the pool, reached through the guard's listener pinned to it, and a block bans that proxy
    from the host for every worker. A source with ``proxy.tiers`` takes the pool of its host's tier
    (``harvester.pageslots.proxy_tiers``: ``direct``, or the connections ``proxy_<country>_<tier>``)."""

    def __init__(self, guard: AddressGuard, client: redis.Redis, environ: Mapping[str, str] | None = None) -> None:
        self.guard, self.health, self.environ = guard, ProxyHealth(client), environ
        self.tiers = ProxyTiers(client)
        self._exits: dict[str, asyncio.Future[GuardProxy | None]] = {}
        self._members: dict[str, list[str]] = {}  # pool -> its connection ids

    async def __call__(self, country: str) -> str | None:
        """The country's exit with no session (every connection takes the pool's turn); None: no proxy."""
        exit_proxy = await self._guard(country)
        return exit_proxy.server if exit_proxy is not None else None

    async def session_exit(self, country: str, host: str, tier: str = "") -> SessionExit | None:
        """The proxy a new session for ``host`` is bound to: the first the shared health and the host's bans
        offer (None when the country has no proxy). On a ``tier``: ``direct`` is the worker's own address (an exit
        with no URL), another tier its pool; a tier whose pool has no connection is an exit no request can take
        (its requests end ``proxy_error``, which says so)."""
        if tier == DIRECT_TIER:
            return SessionExit(DIRECT_TIER, "")
        pool = tier_pool(country, tier) if tier else country
        exit_proxy = await self._guard(pool)
        if exit_proxy is None:
            return SessionExit(tier, NO_POOL_EXIT) if tier else None
        chosen = await asyncio.to_thread(self.health.choose, pool, self._members[pool], host)
        if not chosen:
            return SessionExit("", exit_proxy.server)  # every proxy unknown to the health: the pool's turn
        return SessionExit(chosen[0], await exit_proxy.pinned(chosen[0]))

    async def ban(self, country: str, exit_name: str, host: str, tier: str = "") -> int:
        """``host`` blocked us through ``exit_name``; the pool's proxies it still welcomes."""
        pool = tier_pool(country, tier) if tier else country
        members = self._members.get(pool, [])
        if not exit_name or exit_name not in members:
            return 0
        return await asyncio.to_thread(self.health.ban, pool, exit_name, host, members)

    async def tier_of(self, source: str, host: str, tiers: list[str], quiet: float) -> str:
        """The tier ``source``'s requests to ``host`` take now (shared by every worker)."""
        tier, _ = await asyncio.to_thread(self.tiers.tier_of, source, host, tiers, quiet)
        return tier

    async def tier_blocked(self, source: str, host: str, tier: str, tiers: list[str], quiet: float) -> str:
        """``host`` blocked a request of ``source`` on ``tier``: the host's tier now (higher unless on the top)."""
        now, _ = await asyncio.to_thread(self.tiers.blocked, source, host, tier, tiers, quiet)
        return now

    async def _guard(self, pool: str) -> GuardProxy | None:
        started = self._exits.get(pool)
        if started is None:
            members = proxy_pool(pool, self.environ)
            self._members[pool] = [proxy.connection_id for proxy in members]
            started = self._exits[pool] = asyncio.ensure_future(self._start(pool, members))
        return await started

    def proxies(self, country: str) -> GuardProxy | None:
        """The country's running exit (its counts: bytes relayed, proxy failures), if one was started."""
        started = self._exits.get(country)
        return started.result() if started is not None and started.done() and not started.exception() else None

    async def _start(self, pool: str, members: list[Proxy]) -> GuardProxy | None:
        if not members:
            return None
        exit_proxy = GuardProxy(self.guard, HealthTrackedPool(pool, members, self.health))
        await exit_proxy.start()
        return exit_proxy

    async def aclose(self) -> None:
        for started in self._exits.values():
            if started.done() and not started.exception() and (exit_proxy := started.result()) is not None:
                await exit_proxy.close()
        self._exits.clear()
