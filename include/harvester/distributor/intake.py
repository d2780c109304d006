"""Intake: producers (and workers, for discovered links) push task messages per source into Redis.

``register_source`` writes the source's limits, queue, priority and retries to Redis, so the
distributor and the Lua scripts need no YAML. A push is one pipelined round trip per few thousand
messages and wakes a waiting distributor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import redis

from harvester.config.model import SourceConfig
from harvester.distributor.messages import TaskMessage
from harvester.distributor.store import wake_distributors
from harvester.errors import redis_storage_errors
from harvester.redis_keys import SOURCES_INDEX, SourceKeys
from harvester.settings import HarvesterSettings

PUSH_CHUNK = 1000  # values per RPUSH command
PIPELINE_CHUNK = 10_000  # messages per pipeline round trip


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class RegisteredSource:
    """What the distributor knows of a source, read back from its config hash."""

    name: str
    queue: str
    priority: str
    max_active: int
    per_minute: int
    per_host_max_active: int
    retries: int
    timeout: float = 30.0  # seconds a fetch of this source may take (batch time limits)

    @property
    def high_priority(self) -> bool:
        return self.priority == "high"


def source_registration(source: SourceConfig) -> dict[str, str | int]:
    """The config-hash fields of a source (the Lua scripts read max_active, per_minute, ... from it)."""
    return {
        "name": source.name,
        "queue": source.queue,
        "priority": source.priority,
        "render": source.render,
        "country": source.country or "",
        "max_active": source.rate_limit.max_active,
        "per_minute": source.rate_limit.per_minute,
        "per_host_max_active": source.rate_limit.per_host_max_active or 0,
        "retries": source.retries,
        "timeout": source.timeout,
    }


@redis_storage_errors()
def read_registered_sources(client: redis.Redis) -> dict[str, RegisteredSource]:
    """Every registered source, in two round trips."""
    names = sorted(_text(name) for name in client.smembers(SOURCES_INDEX))
    if not names:
        return {}
    pipeline = client.pipeline(transaction=False)
    for name in names:
        pipeline.hgetall(SourceKeys(name).config)
    sources: dict[str, RegisteredSource] = {}
    for name, raw in zip(names, pipeline.execute(), strict=True):
        fields = {_text(k): _text(v) for k, v in raw.items()}
        if "max_active" not in fields:
            continue  # in the index but its config is gone: nothing can be admitted for it
        sources[name] = RegisteredSource(
            name=name, queue=fields.get("queue", "default"), priority=fields.get("priority", "normal"),
            max_active=int(fields["max_active"]), per_minute=int(fields.get("per_minute", "0")),
            per_host_max_active=int(fields.get("per_host_max_active", "0")),
            retries=int(fields.get("retries", "3")), timeout=float(fields.get("timeout", "30")),
        )
    return sources


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class Intake:
    """The per-source intake lists in Redis."""

    def __init__(self, redis_client: redis.Redis, settings: HarvesterSettings) -> None:
        self.redis = redis_client
        self.settings = settings

    @redis_storage_errors()
    def register_source(self, source: SourceConfig) -> None:
        """Store the source's limits, queue and retries in Redis (idempotent; the latest config wins)."""
        pipeline = self.redis.pipeline(transaction=False)
        self._register(pipeline, source)
        pipeline.execute()

    @staticmethod
    def _register(pipeline: redis.client.Pipeline, source: SourceConfig) -> None:
        pipeline.hset(SourceKeys(source.name).config, mapping=source_registration(source))
        pipeline.sadd(SOURCES_INDEX, source.name)

    def push(self, source: SourceConfig | str, messages: Iterable[TaskMessage]) -> int:
        """Append task messages to the source's intake (registering the source); returns how many.

        Pass the :class:`SourceConfig` (workers pushing discovered links may pass the name of a source a
        producer already registered). Messages must name this source.
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
                self._register(pipeline, source)
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
