"""Each site host's proxy tier for a source with ``proxy.tiers``, shared by every worker through Redis.

As crawlee's ``_ProxyTierTracker``: a host starts on the cheapest tier, moves up when it blocks us there, and comes
back down when the tier below has been quiet. crawlee keeps an error histogram per domain in one process and decays
it by one per request; here the state is in Redis (``PageSlotKeys.proxy_tiers``, the Lua scripts
``proxy_tier_choose`` and ``proxy_tier_block``, Redis TIME as the clock) so every worker's requests to a host agree,
and the decay is time: a block puts its tier above the host for the source's ``proxy.quiet`` (doubled for a block
that comes soon after the host came back down, up to ``2^MAX_DOUBLINGS`` times), and the host's tier is the
cheapest one not above it.

A tier other than ``direct`` is a pool: the connections ``proxy_<country>_<tier>``, ``proxy_<country>_<tier>_<n>``
(:func:`tier_pool` names it, ``harvester.pageslots.proxy_pool`` reads it with the same health and bans as a
country's pool). What each tier carried for a source is counted with its requests
(``harvester.metrics.recording``): the run report's ``proxy_tiers``.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from harvester.config import DIRECT_TIER
from harvester.errors import redis_storage_errors
from harvester.pageslots.scripts import page_slot_scripts
from harvester.redis_keys import PageSlotKeys
from harvester.redis_scripts import text

MAX_DOUBLINGS = 6  # a tier blocked again and again stays above its host at most 64 quiet periods
KEEP_SECONDS = 7 * 86_400.0  # a source's tiers are forgotten this long after its last block (at least)
KEYS = PageSlotKeys()


def tier_pool(country: str, tier: str) -> str:
    """The pool a tier names: its connections are ``proxy_<country>_<tier>`` (``SG_RESIDENTIAL``)."""
    return f"{country}_{tier}".upper()


def keep_seconds(quiet: float) -> float:
    return max(KEEP_SECONDS, 2 * quiet * 2 ** MAX_DOUBLINGS)


@dataclass(frozen=True)
class HostTier:
    """One host's tier for one source, as the page and the report show it."""

    host: str
    tier: str
    moves_up: int
    moves_down: int
    blocks: dict[str, int]  # by tier


class ProxyTiers:
    """``tier_of`` a host for a source, and what a block does to it (``blocked``); tiers are the source's names."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.scripts = page_slot_scripts(client)

    @redis_storage_errors()
    def tier_of(self, source: str, host: str, tiers: list[str], quiet: float) -> tuple[str, float]:
        """The tier the source's requests to ``host`` take now, and the seconds until it may come down one."""
        reply = self.scripts.call("proxy_tier_choose", KEYS, {"proxy_tiers": KEYS.proxy_tiers(source)}, host=host,
                                  tiers=len(tiers), keep_seconds=keep_seconds(quiet))
        return tiers[min(int(reply.tier), len(tiers) - 1)], float(reply.down_in)

    @redis_storage_errors()
    def blocked(self, source: str, host: str, tier: str, tiers: list[str], quiet: float) -> tuple[str, float]:
        """``host`` blocked a request of ``source`` that went out on ``tier``: the host's tier now, and how long
        ``tier`` stays above it. A tier no longer in the source's list (its config changed) changes nothing."""
        if tier not in tiers:
            return self.tier_of(source, host, tiers, quiet)
        reply = self.scripts.call("proxy_tier_block", KEYS, {"proxy_tiers": KEYS.proxy_tiers(source)}, host=host,
                                  tier=tiers.index(tier), tiers=len(tiers), quiet_seconds=quiet,
                                  max_doublings=MAX_DOUBLINGS, keep_seconds=keep_seconds(quiet))
        return tiers[min(int(reply.tier), len(tiers) - 1)], float(reply.quiet_for)

    @redis_storage_errors()
    def hosts(self, source: str, tiers: list[str]) -> list[HostTier]:
        """Every host of the source that ever left the cheapest tier, with its tier and moves."""
        fields = {text(name): text(value) for name, value in self.client.hgetall(KEYS.proxy_tiers(source)).items()}
        found = []
        for host in sorted({name.rsplit("|", 1)[0] for name in fields}):
            index = int(fields.get(f"{host}|tier", 0))
            blocks = {name: int(fields.get(f"{host}|blocks:{position}", 0)) for position, name in enumerate(tiers)}
            found.append(HostTier(host, tiers[min(index, len(tiers) - 1)] if tiers else DIRECT_TIER,
                                  int(fields.get(f"{host}|moves_up", 0)), int(fields.get(f"{host}|moves_down", 0)),
                                  {name: count for name, count in blocks.items() if count}))
        return found
