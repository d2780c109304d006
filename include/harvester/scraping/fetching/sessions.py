"""Sessions of HTTP sources that go out through a country's proxy pool: one exit, one cookie jar, retired on a block.

Why: a site that bans one exit address (a 403 or a challenge for every request from it) also remembers the cookies
it set on that exit; retrying through the same exit, or with the same cookies through another, is blocked again.
As crawlee's ``SessionPool``, a session binds one proxy of the pool and its own cookie jar, per source and site
host; it is retired after a block (401, 403, 429 or a block page), after ``SESSION_MAX_USES`` requests or
``SESSION_MAX_AGE_SECONDS``, and its successor takes the pool's proxy the host has not banned
(``harvester.pageslots.proxy_pool``: the ban is shared in Redis, so every worker's next session avoids that exit).

A source with ``proxy.tiers`` has its sessions on its host's tier (``harvester.pageslots.proxy_tiers``, shared by
every worker): a block moves the host up a tier, and the host's next session takes that tier's pool; the tier is
asked again every ``TIER_RECHECK_SECONDS``, so a host that came back down is seen within that time, and a session
on another tier than its host's retires. On the ``direct`` tier a session has an exit with no URL: the worker's own
address, its own cookie jar.

The exits are the worker's (:class:`ExitPool`, met by ``harvester.pageslots.proxy_pool.CountryExits``): this
module knows no proxy, no Redis, only which exit a session is bound to and the local address that reaches it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from harvester.config import SourceConfig

__all__ = ["NO_POOL_EXIT", "RETIRING_STATUSES", "ExitPool", "Session", "SessionExit", "Sessions", "host_name"]

RETIRING_STATUSES = frozenset({401, 403, 429})  # a site's answers that it holds something against this session
SESSION_MAX_USES = 200  # requests per session: a long-lived session looks like a bot to the sites that count
SESSION_MAX_AGE_SECONDS = 1800.0
RETIRED_REMEMBERED = 1000  # retired sessions' verdicts kept, so a batch asking twice bans an exit once
TIER_RECHECK_SECONDS = 1.0  # a host's tier is asked again this often (another worker may have moved it)
NO_POOL_EXIT = "no-pool:"  # the exit of a tier whose pool has no connection: its requests end proxy_error


def host_name(url: str) -> str:
    """The host a session and an exit's ban are kept for: the URL's host name, lower case, no port."""
    return (urlsplit(url).hostname or "").lower().rstrip(".")


@dataclass(frozen=True)
class SessionExit:
    """One proxy of a country's pool as a session reaches it: its connection id and the worker's local address
    (a guard listener) whose connections try it first."""

    name: str
    url: str  # '' on the direct tier: the worker's own address


class ExitPool(Protocol):
    """The worker's exits by country (``harvester.pageslots.proxy_pool.CountryExits``). Their shared state failing
    (Redis down) raises :class:`~harvester.errors.StorageError`, which the fetcher re-raises: the batch goes back,
    the page is not blamed."""

    async def session_exit(self, country: str, host: str, tier: str = "") -> SessionExit | None:
        """The exit a new session of ``host`` takes (None: the country has no proxy, its sources go direct); on a
        ``tier``, that tier's way out."""
        ...

    async def ban(self, country: str, exit_name: str, host: str, tier: str = "") -> int:
        """``host`` blocked us through ``exit_name``: the pool's exits it still welcomes (0: rotation cannot help)."""
        ...

    async def tier_of(self, source: str, host: str, tiers: list[str], quiet: float) -> str:
        """The tier ``source``'s requests to ``host`` take now."""
        ...

    async def tier_blocked(self, source: str, host: str, tier: str, tiers: list[str], quiet: float) -> str:
        """``host`` blocked a request of ``source`` on ``tier``: the host's tier now."""
        ...


@dataclass
class Session:
    """One source's session at one host: its exit, its cookie jar's name (``key``) and its use."""

    key: str
    source: str
    host: str
    country: str
    exit: SessionExit
    started: float  # monotonic (s): a session's age is this process's
    uses: int = 0
    retired: str = ""  # why, once retired
    rotated: bool | None = field(default=None)  # after a ban: whether another exit still welcomed the host
    tier: str = ""  # the source's proxy tier it goes out on ('' without tiers)
    tiers: tuple[str, ...] = ()  # the source's tiers, cheapest first
    quiet: float = 0.0  # the source's proxy.quiet (s)
    tier_checked: float = 0.0  # monotonic (s): when the host's tier was last asked
    moved_tier: bool = False  # its block moved its host up a tier
    verdict: asyncio.Future[bool] | None = field(default=None, repr=False)  # its block's answer (once)
    tier_check: asyncio.Future[str] | None = field(default=None, repr=False)  # the ask in flight

    def worn(self, max_uses: int, max_age: float) -> str:
        """Why the session has served its time ('' while it has not)."""
        if self.uses >= max_uses:
            return f"{self.uses} requests"
        if time.monotonic() - self.started >= max_age:
            return f"{max_age:g}s old"
        return ""


class Sessions:
    """A worker's current session per (source, site host), for sources whose country has a proxy pool."""

    def __init__(self, exits: ExitPool | None, forget_jar: Callable[[str], None] = lambda jar: None,
                 max_uses: int = SESSION_MAX_USES, max_age: float = SESSION_MAX_AGE_SECONDS) -> None:
        self.exits, self.max_uses, self.max_age = exits, max_uses, max_age
        self.forget_jar = forget_jar  # the fetcher owns the jars: a retired session's goes with it
        self._current: dict[tuple[str, str], Session] = {}
        # a session being opened: the batch's other pages for that host wait for it rather than open their own
        self._opening: dict[tuple[str, str], asyncio.Future[Session | None]] = {}
        self._by_key: OrderedDict[str, Session] = OrderedDict()  # current and recently retired, by key
        self._numbers = itertools.count(1)
        self.started = 0
        self.retired = 0
        self.tier_moves = 0  # sessions retired because their host changed tier (seen here)

    async def of(self, source: SourceConfig, url: str) -> Session | None:
        """The session a request of ``source`` to ``url`` goes out in (a new one past the current one's time, or
        when its host moved to another tier); None when the source goes direct (no country, or the country has no
        proxy and the source no tiers)."""
        if source.country is None or self.exits is None:
            return None
        host = host_name(url)
        session = self._current.get((source.name, host))
        if session is not None and (worn := session.worn(self.max_uses, self.max_age)):
            self._retire(session, f"served its time ({worn})")
            session = None
        if session is not None and session.tiers:
            await self._check_tier(session)
            if session.retired:
                session = None
        if session is None:
            opening = self._opening.get((source.name, host))
            if opening is None:
                opening = self._opening[(source.name, host)] = asyncio.ensure_future(self._open(source, host))
                opening.add_done_callback(lambda _: self._opening.pop((source.name, host), None))
            session = await asyncio.shield(opening)
            if session is None:
                return None
        session.uses += 1
        return session

    async def _check_tier(self, session: Session) -> None:
        """Retire ``session`` if its host moved to another tier (asked every ``TIER_RECHECK_SECONDS``; the batch's
        other pages for the host wait for the one asking, so none goes out on the old tier meanwhile)."""
        if session.tier_check is None and time.monotonic() - session.tier_checked >= TIER_RECHECK_SECONDS:
            assert self.exits is not None  # a session exists only with exits
            session.tier_check = asyncio.ensure_future(
                self.exits.tier_of(session.source, session.host, list(session.tiers), session.quiet))
        if session.tier_check is None:
            return
        checking = session.tier_check
        try:
            tier = await asyncio.shield(checking)
        finally:
            if session.tier_check is checking and checking.done():
                session.tier_check, session.tier_checked = None, time.monotonic()
        if tier != session.tier and not session.retired:
            self._retire(session, f"its host moved from tier {session.tier} to {tier}")
            self.tier_moves += 1

    async def _open(self, config: SourceConfig, host: str) -> Session | None:
        assert self.exits is not None and config.country is not None  # asked only with exits, for a country
        source, country, tiers = config.name, config.country, list(config.proxy.tiers)
        tier = await self.exits.tier_of(source, host, tiers, config.proxy.quiet) if tiers else ""
        exit_ = await self.exits.session_exit(country, host, tier)
        if exit_ is None:
            return None
        session = Session(f"{source}#session-{next(self._numbers)}", source, host, country, exit_, time.monotonic(),
                          tier=tier, tiers=tuple(tiers), quiet=config.proxy.quiet, tier_checked=time.monotonic())
        self._current[(source, host)] = session
        self._by_key[session.key] = session
        while len(self._by_key) > RETIRED_REMEMBERED:
            self._by_key.popitem(last=False)
        self.started += 1
        return session

    async def blocked(self, key: str, reason: str) -> bool | None:
        """The session ``key`` was blocked: retire it and ban its exit from its host (once, however many of its
        pages were blocked). Whether another exit still welcomes the host (None: no such session)."""
        session = self._by_key.get(key)
        if session is None:
            return None
        if session.verdict is None:  # the first to ask bans and reports; the batch's other blocked pages wait
            self._retire(session, f"blocked: {reason}")
            session.verdict = asyncio.ensure_future(self._answer_block(session))
        return await asyncio.shield(session.verdict)

    async def _answer_block(self, session: Session) -> bool:
        assert self.exits is not None  # a session exists only with exits
        welcome = await self.exits.ban(session.country, session.exit.name, session.host, session.tier)
        moved = False
        if session.tier:  # the host moves up a tier for every worker (unless it is on the top one)
            moved = await self.exits.tier_blocked(session.source, session.host, session.tier,
                                                  list(session.tiers), session.quiet) != session.tier
            self.tier_moves += moved
        session.rotated, session.moved_tier = moved or welcome > 0, moved
        return session.rotated

    async def rotated_hosts(self, blocks: Mapping[str, tuple[str, str]]) -> set[str]:
        """Retire each blocked session (key -> its host and the block's reason); the hosts another exit of the
        pool still welcomes (their blocks need not pause them: the next session goes out elsewhere)."""
        return {host for key, (host, reason) in blocks.items() if await self.blocked(key, reason)}

    def moved_hosts(self, blocks: Mapping[str, tuple[str, str]]) -> set[str]:
        """The hosts of blocked sessions (key -> host and reason, after :meth:`rotated_hosts`) whose block moved them
        up a tier: the next tier leaves from other addresses, so the block says nothing of the rate it can take."""
        return {host for key, (host, _) in blocks.items() if (session := self._by_key.get(key)) and session.moved_tier}

    def _retire(self, session: Session, reason: str) -> None:
        if session.retired:
            return
        session.retired = reason
        self.retired += 1
        if self._current.get((session.source, session.host)) is session:
            del self._current[(session.source, session.host)]
        self.forget_jar(session.key)
