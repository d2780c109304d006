"""Slow requests lend their source's ``max_active`` place back, so a slow or dead host holds nobody up.

A source over thousands of sites meets hosts that answer after 10 s, or accept a connection and never answer.
Each such request holds one of the source's ``max_active`` places for its whole timeout; with 5 % of hosts slow,
they held more than half of the places and every healthy host waited. Its politeness is per host
(``per_host_max_active``), so a request that has waited past ``slow_request_lend_seconds`` keeps its host's place
and its lease, and lends the source's place back: admission may start another task in it
(``lua/lend_places.lua``; ``admit.lua`` counts ``max_active`` less the places lent). A source without a per-host
limit lends nothing (``max_active`` is then the only bound a single site's requests meet), and places lent are at
most twice ``max_active``. Crawlers built on one event loop (Scrapy, crawlee) let a slow request cost a socket, not a
slot of the crawl; this is the same for a limit held across machines.

A batch is a Celery task: once its refill time is over it waits for its last pages, and a slow host's page then
holds the worker process for its timeout (two processes waiting so stopped a broad source for 10 s). So a batch
left with only lent pages, each safe to send again, hands them back (``lua/hand_back.lua``): their tasks return to
the front of intake with the same attempt, uncharged, and the process goes back to its queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harvester.errors import redis_storage_errors
from harvester.redis_scripts import Scripts

__all__ = ["LentPlaces", "PlaceLending"]


@dataclass(frozen=True, slots=True)
class LentPlaces:
    """The tasks one call lent the places of (``lent``), the source's places lent now (``total``), and whether the
    source lends at all (``lends``: it has ``per_host_max_active``); a page not lent while ``lends`` may be later,
    once a lent place comes back (at most twice ``max_active`` are lent)."""

    lent: frozenset[str]
    total: int
    lends: bool = True


class PlaceLending:
    """Lends the places of a source's slow requests (see the module docstring), on the store's scripts."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts

    @redis_storage_errors()
    def lend(self, source: str, leases: Mapping[str, str], now: float | None = None) -> LentPlaces:
        """Lend the places of ``leases`` (task id -> token) still held and started; each lease lends once. None
        for a source without ``per_host_max_active``, nor past twice ``max_active`` places lent."""
        if not leases:
            return LentPlaces(frozenset(), 0)
        arguments = [part for task_id, token in leases.items() for part in (task_id, str(token))]
        reply = self.scripts.call("lend_places", source, now="" if now is None else repr(float(now)),
                                  leases=arguments)
        return LentPlaces(frozenset(reply.lent), reply.lent_total, bool(reply.lends))

    @redis_storage_errors()
    def hand_back(self, source: str, leases: Mapping[str, str]) -> int:
        """Put the started tasks of ``leases`` (task id -> token) still held back in intake with the same attempt
        (their requests were cancelled: nothing is known of their outcome); the number handed back."""
        if not leases:
            return 0
        arguments = [part for task_id, token in leases.items() for part in (task_id, str(token))]
        return self.scripts.call("hand_back", source, leases=arguments).handed_back
