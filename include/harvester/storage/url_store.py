"""The duplicate-URL checker: "was this URL seen within the source's harvesting lag?" for thousands of
URLs in one Redis round trip, with MongoDB's output as the authority.

Each URL is one Redis key (per source, under the source's hash tag) set with ``SET NX EX lag``: the
reply says whether the URL is new and marks it in the same step, so two listing pages discovering the
same link at once give it to only one of them. Keys expire after the harvesting lag. Redis is a cache
that may lose data (a restart without AOF, an eviction); URLs Redis calls new are then checked against
the output collection (records harvested within the lag), so a lost cache never re-harvests early.
Exact keys, no Bloom filter: no URL is ever dropped by a false positive. Every URL given is put in
its canonical form first (:mod:`harvester.urls`, the function discovery and records use), so two
spellings of one page are one key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime

import redis
from pymongo.collection import Collection

from harvester.config import SourceConfig
from harvester.errors import mongo_storage_errors, redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.urls import DEFAULT_SESSION_IDS, canonicalise_url


def canonical_urls(urls: Iterable[str], source: SourceConfig | None = None) -> list[str]:
    """The canonical forms (without the source's session ids), each once, in input order; what is not an
    http(s) URL is left out."""
    session_ids = source.session_ids.rules if source is not None else DEFAULT_SESSION_IDS
    return list(dict.fromkeys(url for raw in urls if (url := canonicalise_url(raw, session_ids=session_ids))))


def url_digest(url: str) -> str:
    """A short fixed-size key part for a URL (URLs can be kilobytes long)."""
    return hashlib.blake2b(url.encode(), digest_size=16).hexdigest()


class URLStore:
    """Per-source seen-URL keys in Redis; optionally backed by the output collection."""

    def __init__(self, redis_client: redis.Redis) -> None:
        self.redis = redis_client

    @staticmethod
    def key(source: str, url: str) -> str:
        return f"{SourceKeys(source).seen_urls}:{url_digest(url)}"

    @staticmethod
    def lag_seconds(source: SourceConfig) -> int:
        return max(1, int(source.harvesting_lag.total_seconds()))

    @mongo_storage_errors()
    @redis_storage_errors()
    def filter_new(self, source: SourceConfig, urls: Iterable[str], owner: str = "1",
                   authority: Collection | None = None, now: datetime | None = None) -> list[str]:
        """The URLs not seen within the lag, in input order, each now marked as seen (one round trip).

        ``owner`` (the discovering task's id) is stored as the mark: when that same task runs again
        (a retry after a crash between marking and queueing), its URLs count as new again, so a
        retry never loses them; any other task sees them as duplicates. URLs come back canonical.
        """
        unique = canonical_urls(urls, source)
        if not unique:
            return []
        lag = self.lag_seconds(source)
        pipeline = self.redis.pipeline(transaction=False)
        for url in unique:
            pipeline.set(self.key(source.name, url), owner, nx=True, ex=lag, get=True)
        replies = pipeline.execute()
        mine = owner.encode()
        new = [url for url, previous in zip(unique, replies, strict=True) if previous is None or previous == mine]
        if new and authority is not None:
            new = self._not_in_output(new, authority, source, now)
        return new

    def _not_in_output(self, urls: list[str], authority: Collection, source: SourceConfig,
                       now: datetime | None) -> list[str]:
        since = (now or datetime.now(UTC)) - source.harvesting_lag
        stored = {
            document["url"]
            for document in authority.find({"url": {"$in": urls}, "harvested_at": {"$gte": since}},
                                           {"url": 1, "_id": 0})
        }
        return [url for url in urls if url not in stored]

    @redis_storage_errors()
    def mark_seen(self, source: SourceConfig, urls: Iterable[str]) -> None:
        """Refresh the lag of URLs just harvested (they were stored, so they count from now)."""
        lag = self.lag_seconds(source)
        pipeline = self.redis.pipeline(transaction=False)
        count = 0
        for url in canonical_urls(urls, source):
            pipeline.set(self.key(source.name, url), "stored", ex=lag)
            count += 1
        if count:
            pipeline.execute()

    @redis_storage_errors()
    def forget(self, source: SourceConfig, urls: Iterable[str]) -> None:
        """Unmark URLs that were claimed but not queued (over a cap), so a later run may take them."""
        keys = [self.key(source.name, url) for url in canonical_urls(urls, source)]
        if keys:
            self.redis.delete(*keys)

    @redis_storage_errors()
    def seen(self, source: SourceConfig, urls: Iterable[str]) -> dict[str, bool]:
        """Read-only check (for `harvester try`): which URLs (as given) the store already holds."""
        unique = list(dict.fromkeys(urls))
        if not unique:
            return {}
        pipeline = self.redis.pipeline(transaction=False)
        for url in unique:
            pipeline.exists(self.key(source.name, canonicalise_url(url, session_ids=source.session_ids.rules) or url))
        return {url: bool(reply) for url, reply in zip(unique, pipeline.execute(), strict=True)}


RUN_KEYS_SECONDS = 7 * 24 * 3600  # a run's keys in Redis (its frontier, its figures, its hosts) outlive it this long


class RunFrontier:
    """Per-run bookkeeping of listing discovery: listing pages queued once, and the max_new_urls cap."""

    def __init__(self, redis_client: redis.Redis, ttl_seconds: int = RUN_KEYS_SECONDS) -> None:
        self.redis = redis_client
        self.ttl = ttl_seconds

    @redis_storage_errors()
    def new_listing_pages(self, source: str, run_id: str | None, urls: list[str], owner: str = "1") -> list[str]:
        """The listing URLs not yet queued in this run, now marked as queued by ``owner`` (one round trip).

        As in :meth:`URLStore.filter_new`, the same owner asking again gets its URLs back (retries).
        """
        if not urls:
            return []
        key = SourceKeys(source).run_listing_pages(run_id)
        pipeline = self.redis.pipeline(transaction=False)
        for url in urls:
            pipeline.hsetnx(key, url, owner)
            pipeline.hget(key, url)
        pipeline.expire(key, self.ttl)
        replies = pipeline.execute()
        holders = replies[1:-1:2]
        mine = owner.encode()
        return [url for url, holder in zip(urls, holders, strict=True) if holder == mine]

    @redis_storage_errors()
    def reserve_new_urls(self, source: str, run_id: str | None, wanted: int, cap: int) -> int:
        """How many of ``wanted`` new detail URLs still fit under the run's cap (reserved atomically)."""
        return reserve_under_cap(self.redis, SourceKeys(source).run_new_urls(run_id), wanted, cap, self.ttl)

    @redis_storage_errors()
    def give_back_new_urls(self, source: str, run_id: str | None, count: int) -> None:
        """Return ``count`` reserved places (URLs granted, then screened out), so later pages may use them."""
        if count > 0:
            self.redis.decrby(SourceKeys(source).run_new_urls(run_id), count)

    @redis_storage_errors()
    def reserve_listing_pages(self, source: str, run_id: str | None, wanted: int, cap: int) -> int:
        """How many of ``wanted`` newly discovered listing pages still fit under the run's
        ``max_listing_pages_per_run`` (reserved atomically, across every worker)."""
        return reserve_under_cap(self.redis, SourceKeys(source).run_listing_count(run_id), wanted, cap, self.ttl)


def reserve_under_cap(client: redis.Redis, key: str, wanted: int, cap: int, ttl: int) -> int:
    """How many of ``wanted`` still fit under ``cap`` on the counter ``key``: INCRBY first, so two callers
    never both get the last place, then what did not fit is given back."""
    if wanted <= 0:
        return 0
    pipeline = client.pipeline(transaction=False)
    pipeline.incrby(key, wanted)
    pipeline.expire(key, ttl)
    total = int(pipeline.execute()[0])
    granted = max(0, min(wanted, cap - (total - wanted)))
    if granted < wanted:
        client.decrby(key, wanted - granted)
    return granted
