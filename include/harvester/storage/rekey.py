"""Move a source's stored URLs to the canonical form of :mod:`harvester.urls` (after the canonical form
changed: when the hand-written canonicaliser gave way to w3lib's, when session ids left the canonical
URL, or when a source's ``session_ids`` names more or keeps some).

Records: each output document whose ``url`` is not canonical gets the canonical one; when two
documents turn out to be spellings of one page (and ``url`` is part of the output key), the one
harvested last is kept. Seen-URL keys: the key of each old spelling of a stored URL is moved to the
new spelling with its remaining time to live. Keys of URLs that were seen but never stored cannot
be found (a key holds only a digest); they expire after the harvesting lag. Idempotent: a second
run finds nothing to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from pymongo.collection import Collection

from harvester.config import SourceConfig
from harvester.storage.url_store import URLStore
from harvester.urls import canonicalise_url

CHUNK = 1000


@dataclass
class RekeyResult:
    """What a rekey changed (or, in a dry run, would change)."""

    source: str
    to_move: int = 0
    moved: int = 0
    duplicates_removed: int = 0
    seen_keys_moved: int = 0
    not_http: int = 0


def _harvested_at(document: dict[str, Any]) -> datetime:
    """When a record was harvested, always time-zone aware; a record without a time counts as oldest."""
    moment = document.get("harvested_at")
    if not isinstance(moment, datetime):
        return datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _newer(first: dict[str, Any], second: dict[str, Any]) -> bool:
    return _harvested_at(first) > _harvested_at(second)


def rekey_source(source: SourceConfig, output: Collection, redis_client: redis.Redis | None,
                 dry_run: bool = False) -> RekeyResult:
    result = RekeyResult(source.name)
    keyed_by_url = "url" in source.output.key
    projection = {name: 1 for name in (*source.output.key, "url", "harvested_at")}
    moved_urls: list[tuple[str, str]] = []
    for document in output.find({"url": {"$type": "string"}}, projection).sort("_id", 1):
        old = document["url"]
        new = canonicalise_url(old, session_ids=source.session_ids.rules)
        if new is None:
            result.not_http += 1
            continue
        if new == old:
            continue
        result.to_move += 1
        if dry_run:
            continue
        if keyed_by_url:
            same_key = {name: document.get(name) for name in source.output.key if name != "url"}
            existing = output.find_one({**same_key, "url": new}, projection)
            if existing is not None:
                result.duplicates_removed += 1
                if not _newer(document, existing):
                    output.delete_one({"_id": document["_id"]})
                    moved_urls.append((old, new))
                    continue
                output.delete_one({"_id": existing["_id"]})
        output.update_one({"_id": document["_id"]}, {"$set": {"url": new}})
        result.moved += 1
        moved_urls.append((old, new))
    if redis_client is not None and not dry_run:
        for start in range(0, len(moved_urls), CHUNK):
            result.seen_keys_moved += _move_seen_keys(source.name, moved_urls[start:start + CHUNK], redis_client)
    return result


def _move_seen_keys(source: str, pairs: list[tuple[str, str]], redis_client: redis.Redis) -> int:
    """Copy each old key's value and remaining TTL to the new key (unless it exists), drop the old one."""
    reading = redis_client.pipeline(transaction=False)
    for old, _ in pairs:
        key = URLStore.key(source, old)
        reading.get(key)
        reading.pttl(key)
    replies = reading.execute()
    writing = redis_client.pipeline(transaction=False)
    moved = 0
    for index, (old, new) in enumerate(pairs):
        value, ttl = replies[2 * index], replies[2 * index + 1]
        if value is None:
            continue
        writing.set(URLStore.key(source, new), value, nx=True, px=ttl if ttl and ttl > 0 else None)
        writing.delete(URLStore.key(source, old))
        moved += 1
    if moved:
        writing.execute()
    return moved
