"""The one registered copy of each source: its validated config, in Redis, under a content version.

The producer registers a source (:meth:`SourceRegistry.register`) every time it produces a run: one
HSET of the source's config hash writes the fields the Lua scripts read (``max_active``, ``per_minute``,
``per_host_max_active``, ``retries``), the ones the distributor orders and routes by (queue, priority,
render, country, timeout), the whole validated config as JSON (``document``) and its content hash
(``version``), all at once. Workers and page slots read the config from that copy
(:class:`RegisteredSources`, cached by version: one HGET to check), the distributor reads the fields
(:meth:`SourceRegistry.read_all`), and the scripts read them too, so every limit of a source changes at
the same moment everywhere. A YAML edit reaches them through the next registration, never through a
re-parse in a worker.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pydantic
import redis

from harvester.config import SourceConfig
from harvester.errors import SourceNotRegistered, redis_storage_errors
from harvester.queues import DEFAULT_QUEUE
from harvester.redis_keys import SOURCES_INDEX, SourceKeys
from harvester.redis_scripts import text

__all__ = ["RegisteredSource", "RegisteredSources", "SourceRegistry", "registration_fields"]

DOCUMENT_FIELD = "document"  # the whole validated config, JSON
VERSION_FIELD = "version"  # its content hash: workers' caches compare it
_READ_FIELDS = ("queue", "priority", "max_active", "per_minute", "per_host_max_active", "retries", "timeout",
                "render", "country", "follows_chains",
                VERSION_FIELD)  # what the distributor and the metrics read (not the document)


@dataclass(frozen=True)
class RegisteredSource:
    """What the distributor knows of a source, read back from its config hash."""

    name: str
    queue: str
    priority: str
    max_active: int  # the source's tasks in flight (reserved or leased) across every worker
    per_minute: int
    per_host_max_active: int  # in flight at one site host: tasks at admission, requests at fetch (0: no limit)
    retries: int
    timeout: float = 30.0  # seconds a fetch of this source may take (batch time limits)
    render: str = "http"
    country: str = ""  # browser sources: whose page slots serve them
    version: str = ""
    follows_chains: bool = False  # listing.next over HTTP: its batches follow chains (harvester.workers.chains)

    @property
    def high_priority(self) -> bool:
        return self.priority == "high"

    @property
    def browser(self) -> bool:
        return self.render == "browser"


def registration_fields(source: SourceConfig) -> dict[str, str | int | float]:
    """The config-hash fields of a source: those the scripts and the distributor read, and the whole
    validated config with its content hash."""
    document = source.model_dump_json()
    return {
        "name": source.name,
        "queue": source.queue,
        "priority": source.priority,
        "render": source.render,
        "country": source.country or "",
        "max_active": source.rate_limit.max_active,
        "per_minute": source.rate_limit.per_minute,
        "per_host_max_active": source.rate_limit.per_host_max_active or 0,
        "per_host_per_minute": source.rate_limit.per_host_per_minute or 0,  # admission spaces a host's tasks
        "retries": source.retries,
        "timeout": source.timeout,
        "follows_chains": int(source.follows_chains),
        DOCUMENT_FIELD: document,
        VERSION_FIELD: hashlib.sha256(document.encode()).hexdigest()[:16],
    }


class SourceRegistry:
    """Registering sources, and the distributor's view of every registered one."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    @staticmethod
    def queue_registration(pipeline: redis.client.Pipeline, source: SourceConfig) -> None:
        """Queue the source's registration on a pipeline the caller sends (idempotent; the latest wins)."""
        pipeline.hset(SourceKeys(source.name).config, mapping=registration_fields(source))
        pipeline.sadd(SOURCES_INDEX, source.name)

    @redis_storage_errors()
    def register(self, source: SourceConfig) -> None:
        pipeline = self.redis.pipeline(transaction=False)
        self.queue_registration(pipeline, source)
        pipeline.execute()

    @redis_storage_errors()
    def read_all(self) -> dict[str, RegisteredSource]:
        """Every registered source, in two round trips (the documents stay in Redis)."""
        names = sorted(text(name) for name in self.redis.smembers(SOURCES_INDEX))
        if not names:
            return {}
        pipeline = self.redis.pipeline(transaction=False)
        for name in names:
            self.queue_read(pipeline, name)
        replies = zip(names, pipeline.execute(), strict=True)
        return {name: source for name, values in replies if (source := self.registered(name, values)) is not None}

    @staticmethod
    def queue_read(pipeline: redis.client.Pipeline, name: str) -> None:
        """Queue the read of one registration (its reply goes to :meth:`registered`) on a caller's pipeline."""
        pipeline.hmget(SourceKeys(name).config, _READ_FIELDS)

    @staticmethod
    def registered(name: str, values: list[bytes | str | None]) -> RegisteredSource | None:
        """A registration from its queued read; None when its config is gone (nothing can be admitted)."""
        fields = {field: text(value) for field, value in zip(_READ_FIELDS, values, strict=True) if value is not None}
        if "max_active" not in fields:
            return None
        return RegisteredSource(
            name=name, queue=fields.get("queue", DEFAULT_QUEUE), priority=fields.get("priority", "normal"),
            max_active=int(fields["max_active"]), per_minute=int(fields.get("per_minute", "0")),
            per_host_max_active=int(fields.get("per_host_max_active", "0")),
            retries=int(fields.get("retries", "3")), timeout=float(fields.get("timeout", "30")),
            render=fields.get("render", "http"), country=fields.get("country", ""),
            version=fields.get(VERSION_FIELD, ""), follows_chains=fields.get("follows_chains") == "1",
        )


class RegisteredSources:
    """The validated configs of registered sources as one process reads them: cached by version.

    :meth:`get` asks Redis for the source's version (one HGET) and parses the registered document only
    when the version changed, so a worker sees a new registration at its next batch and never a YAML
    file. ``SourceNotRegistered`` when no producer registered the source (or registered it before
    registrations carried the whole config).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._cached: dict[str, tuple[str, SourceConfig]] = {}

    @redis_storage_errors()
    def get(self, name: str) -> SourceConfig:
        key = SourceKeys(name).config
        version = self.redis.hget(key, VERSION_FIELD)
        if version is None:
            raise SourceNotRegistered(name)
        cached = self._cached.get(name)
        if cached is not None and cached[0] == text(version):
            return cached[1]
        version, document = self.redis.hmget(key, [VERSION_FIELD, DOCUMENT_FIELD])
        if version is None or document is None:
            raise SourceNotRegistered(name)
        try:
            source = SourceConfig.model_validate_json(document)
        except pydantic.ValidationError as error:  # registered by a Harvester whose source schema differs
            raise SourceNotRegistered(name, f"its registered config does not validate: {error.errors()[0]['msg']}"
                                      ) from error
        self._cached[name] = (text(version), source)
        return source

    def version(self, name: str) -> str | None:
        """The version this process holds of ``name`` (None: not read yet)."""
        cached = self._cached.get(name)
        return cached[0] if cached else None
