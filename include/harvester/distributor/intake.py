"""Intake: producers (and workers, for discovered links) push task messages per source into Redis.

``register_source`` writes the source's registered copy to Redis (:mod:`harvester.distributor.registry`),
so the distributor, the Lua scripts, the workers and the page slots need no YAML. A push is one pipelined
round trip per few thousand messages and wakes a waiting distributor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice

import redis

from harvester.config import SourceConfig
from harvester.distributor.messages import TaskMessage
from harvester.distributor.registry import SourceRegistry
from harvester.distributor.store import wake_distributors
from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

PUSH_CHUNK = 1000  # values per RPUSH command
PIPELINE_CHUNK = 10_000  # messages per pipeline round trip


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class Intake:
    """The per-source intake lists in Redis."""

    def __init__(self, redis_client: redis.Redis, settings: HarvesterSettings) -> None:
        self.redis = redis_client
        self.settings = settings

    def register_source(self, source: SourceConfig) -> None:
        """Register the validated source in Redis (idempotent; the latest registration wins)."""
        SourceRegistry(self.redis).register(source)

    def push(self, source: SourceConfig | str, messages: Iterable[TaskMessage]) -> int:
        """Append task messages to the source's intake (registering the source); returns how many.

        Given the :class:`SourceConfig` (the producer), the source is registered in the same round trip;
        given its name (workers pushing discovered links), the registration the producer made stays as it
        is. Messages must name this source.
        """
        name = source if isinstance(source, str) else source.name

        def serialised() -> Iterator[str]:
            for message in messages:
                if message.source != name:
                    raise ValueError(f"task {message.task_id} is for source {message.source!r}, not {name!r}")
                yield message.to_json()

        return self._push(source, serialised())

    def push_raw(self, source: SourceConfig | str, raw_messages: Iterable[str]) -> int:
        """Append already serialised messages without validation (tools, and tests of malformed input)."""
        return self._push(source, raw_messages)

    @redis_storage_errors()
    def _push(self, source: SourceConfig | str, raw_messages: Iterable[str]) -> int:
        name = source if isinstance(source, str) else source.name
        keys = SourceKeys(name)
        total = 0
        first = True
        for block in _chunks(raw_messages, PIPELINE_CHUNK):
            pipeline = self.redis.pipeline(transaction=False)
            if first and not isinstance(source, str):
                SourceRegistry.queue_registration(pipeline, source)
            first = False
            for chunk in _chunks(block, PUSH_CHUNK):
                pipeline.rpush(keys.intake, *chunk)
            pipeline.hincrby(keys.counters, "pushed", len(block))
            wake_distributors(pipeline, name)
            pipeline.execute()
            total += len(block)
        if first and not isinstance(source, str):
            self.register_source(source)
        return total

    @redis_storage_errors()
    def pending(self, source: str) -> int:
        return int(self.redis.llen(SourceKeys(source).intake))
