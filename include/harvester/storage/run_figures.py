"""Figures of one run that only the workers see, kept in Redis beside the run's frontier:
sitemaps read and what they listed, URLs a sitemap's ``lastmod`` showed unchanged, bytes that 304s
saved, the sitemaps that were cut or refused (named, capped), and each proxy tier's traffic. The run's
report reads them; they expire with the frontier's keys (``RUN_KEYS_SECONDS``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.storage.url_store import RUN_KEYS_SECONDS, reserve_under_cap

PROBLEMS_KEPT = 50  # sitemaps named per run in the report; the counters count them all
# proxy.tiers: each tier's traffic as figures "<kind>:<tier>", a run's and a source's totals alike
PROXY_TIER_REQUESTS = "proxy_tier_requests"
PROXY_TIER_BYTES = "proxy_tier_bytes"
PROXY_TIER_KINDS = {PROXY_TIER_REQUESTS: "requests", PROXY_TIER_BYTES: "bytes"}


def proxy_tier_traffic(figures: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Each tier's ``requests`` and ``bytes`` read back from figures named ``proxy_tier_requests:<tier>`` and
    ``proxy_tier_bytes:<tier>`` (the workers write them, :mod:`harvester.metrics.recording`); other figures are
    passed over. One reader for the run's report and the metrics, so both say the same of a tier."""
    tiers: dict[str, dict[str, int]] = {}
    for name, amount in figures.items():
        figure, _, tier = name.partition(":")
        if figure in PROXY_TIER_KINDS and tier:
            tiers.setdefault(tier, dict.fromkeys(PROXY_TIER_KINDS.values(), 0))[PROXY_TIER_KINDS[figure]] += int(amount)
    return tiers


class RunFigures:
    """Per-run counters and named sitemap problems, one pipelined round trip per call."""

    def __init__(self, redis_client: redis.Redis, ttl_seconds: int = RUN_KEYS_SECONDS) -> None:
        self.redis = redis_client
        self.ttl = ttl_seconds

    @redis_storage_errors()
    def add(self, source: str, run_id: str | None, figures: Mapping[str, int],
            problems: list[tuple[str, str]] | None = None) -> None:
        if not any(figures.values()) and not problems:
            return
        keys = SourceKeys(source)
        pipeline = self.redis.pipeline(transaction=False)
        self.queue_add(pipeline, source, run_id, figures)
        if problems:
            key = keys.run_sitemap_problems(run_id)
            pipeline.rpush(key, *(json.dumps({"url": url, "problem": problem}) for url, problem in problems))
            pipeline.ltrim(key, 0, PROBLEMS_KEPT - 1)
            pipeline.expire(key, self.ttl)
        pipeline.execute()

    def queue_add(self, pipeline: redis.client.Pipeline, source: str, run_id: str | None,
                  figures: Mapping[str, int]) -> None:
        """Queue the counters on a caller's pipeline (a batch sends them with its outcome counters)."""
        key = SourceKeys(source).run_figures(run_id)
        given = {name: int(amount) for name, amount in figures.items() if amount}
        for name, amount in given.items():
            pipeline.hincrby(key, name, amount)
        if given:
            pipeline.expire(key, self.ttl)

    @redis_storage_errors()
    def read(self, source: str, run_id: str | None) -> tuple[dict[str, int], list[dict[str, Any]]]:
        keys = SourceKeys(source)
        pipeline = self.redis.pipeline(transaction=False)
        pipeline.hgetall(keys.run_figures(run_id))
        pipeline.lrange(keys.run_sitemap_problems(run_id), 0, PROBLEMS_KEPT - 1)
        raw_figures, raw_problems = pipeline.execute()
        figures = {(name.decode() if isinstance(name, bytes) else name): int(amount)
                   for name, amount in raw_figures.items()}
        return figures, [json.loads(entry) for entry in raw_problems]

    @redis_storage_errors()
    def reserve(self, key: str, wanted: int, cap: int) -> int:
        """How many of ``wanted`` still fit under ``cap`` on the counter ``key`` (reserved atomically)."""
        return reserve_under_cap(self.redis, key, wanted, cap, self.ttl)
