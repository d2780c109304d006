"""The registered sources as one distributor sees them, cheap at thousands of sources: the index is read
again every SOURCES_REFRESH_SECONDS and only the sources new to it are read whole (a new source is admitted
within that); every registration is read again every SOURCES_FULL_REFRESH_SECONDS. The limits themselves are
read by the Lua scripts from Redis at every admission, so only a changed source's queue and priority can lag
this long."""

from __future__ import annotations

import time

import redis

from harvester.distributor.registry import RegisteredSource, SourceRegistry
from harvester.redis_keys import SOURCES_INDEX

SOURCES_REFRESH_SECONDS = 1.0
SOURCES_FULL_REFRESH_SECONDS = 30.0


class KnownSources:
    """The sources a distributor admits for, read from their registrations (:mod:`.registry`)."""

    def __init__(self, redis_client: redis.Redis, registry: SourceRegistry) -> None:
        self.redis = redis_client
        self.registry = registry
        self.sources: dict[str, RegisteredSource] = {}  # as last read
        self._read_at = float("-inf")
        self._fully_read_at = float("-inf")

    def current(self) -> dict[str, RegisteredSource]:
        """The sources by name, read again when due."""
        now = time.monotonic()
        if now - self._read_at >= SOURCES_REFRESH_SECONDS:
            if now - self._fully_read_at >= SOURCES_FULL_REFRESH_SECONDS:
                self.sources = self.registry.read_all()
                self._fully_read_at = now
            else:
                self.sources = self._newly_registered(self.sources)
            self._read_at = now
        return self.sources

    def read_index_soon(self) -> None:
        """Look at the index at the next :meth:`current` (a wake-up named a source not known yet)."""
        self._read_at = float("-inf")

    def read_all_soon(self) -> None:
        """Read every registration at the next :meth:`current` (Redis is back: it may have been replaced)."""
        self._read_at = self._fully_read_at = float("-inf")

    def _newly_registered(self, known: dict[str, RegisteredSource]) -> dict[str, RegisteredSource]:
        """The index read again, and only the sources new to it read whole: at 5,000 sources re-reading every
        registration each second cost more than the admission it serves."""
        members = self.redis.smembers(SOURCES_INDEX)
        names = {name.decode() if isinstance(name, bytes) else str(name) for name in members}
        sources = {name: source for name, source in known.items() if name in names}
        if new := sorted(names - sources.keys()):
            pipeline = self.redis.pipeline(transaction=False)
            for name in new:
                self.registry.queue_read(pipeline, name)
            for name, values in zip(new, pipeline.execute(), strict=True):
                if (source := self.registry.registered(name, values)) is not None:
                    sources[name] = source
        return dict(sorted(sources.items()))
