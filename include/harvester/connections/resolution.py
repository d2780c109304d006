"""How a connection id resolves, first answer wins: a registered resolver (Airflow's, inside Airflow), the
environment variable ``AIRFLOW_CONN_<ID>``, else the HARVESTER_* default (MongoDB and Redis only)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

from harvester.connections.targets import (
    ConnectionFields,
    HttpCredentials,
    MongoTarget,
    RedisTarget,
    http_credentials_from_fields,
    mongo_target_from_fields,
    redis_target_from_fields,
    sentinel_fields,
)
from harvester.errors import ConnectionNotFound
from harvester.settings import HarvesterSettings

log = logging.getLogger(__name__)

MONGO_DEFAULT = "mongo_default"
REDIS_DEFAULT = "redis_default"
ENVIRONMENT_PREFIX = "AIRFLOW_CONN_"


class ConnectionResolver(Protocol):
    """Turns a connection id into a target, or None when it does not know the id."""

    def mongo(self, connection_id: str) -> MongoTarget | None: ...

    def redis(self, connection_id: str) -> RedisTarget | None: ...


class FieldsResolver:
    """A resolver that finds a connection's fields and reads them as each client's hook does: a subclass says
    where the fields come from (:meth:`fields`; :meth:`afields` in an event loop, the triggerer's)."""

    def fields(self, connection_id: str) -> tuple[ConnectionFields, str] | None:
        """The connection's fields and where they came from; None when there is no such connection."""
        raise NotImplementedError

    async def afields(self, connection_id: str) -> tuple[ConnectionFields, str] | None:
        return self.fields(connection_id)

    def mongo(self, connection_id: str) -> MongoTarget | None:
        found = self.fields(connection_id)
        return mongo_target_from_fields(connection_id, *found) if found else None

    def redis(self, connection_id: str) -> RedisTarget | None:
        found = self.fields(connection_id)
        return redis_target_from_fields(connection_id, *found) if found else None

    def http(self, connection_id: str) -> HttpCredentials | None:
        found = self.fields(connection_id)
        return http_credentials_from_fields(connection_id, *found) if found else None

    async def amongo(self, connection_id: str) -> MongoTarget | None:
        found = await self.afields(connection_id)
        return mongo_target_from_fields(connection_id, *found) if found else None

    async def aredis(self, connection_id: str) -> RedisTarget | None:
        found = await self.afields(connection_id)
        return redis_target_from_fields(connection_id, *found) if found else None


class EnvironmentResolver(FieldsResolver):
    """``AIRFLOW_CONN_<ID>`` variables, in Airflow's URI or JSON form, read without Airflow."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = environ

    def fields(self, connection_id: str) -> tuple[ConnectionFields, str] | None:
        name = ENVIRONMENT_PREFIX + connection_id.upper()
        value = (self.environ if self.environ is not None else os.environ).get(name)
        if not value:
            return None
        return ConnectionFields.from_environment_value(value), f"environment variable {name}"


_resolvers: list[ConnectionResolver] = []
_environment = EnvironmentResolver()
_warned_fallbacks: set[tuple[str, str]] = set()


def register_resolver(resolver: ConnectionResolver) -> None:
    """Consult ``resolver`` before the environment (once per resolver type: re-imports do not stack)."""
    if not any(type(known) is type(resolver) for known in _resolvers):
        _resolvers.insert(0, resolver)


def unregister_resolver(resolver: ConnectionResolver) -> None:
    with contextlib.suppress(ValueError):
        _resolvers.remove(resolver)


def registered_resolvers() -> tuple[ConnectionResolver, ...]:
    return tuple(_resolvers)


def _fallback(kind: str, connection_id: str, default: str | None, variable: str) -> str:
    if not default:
        raise ConnectionNotFound(f"no connection {connection_id!r} and {variable} is not set: cannot reach {kind}")
    if connection_id not in (MONGO_DEFAULT, REDIS_DEFAULT) and (kind, connection_id) not in _warned_fallbacks:
        _warned_fallbacks.add((kind, connection_id))
        log.warning("no connection %r is defined: %s uses %s", connection_id, kind, variable)
    return default


def _mongo_from_environment(connection_id: str, settings: HarvesterSettings) -> MongoTarget:
    if (target := _environment.mongo(connection_id)) is not None:
        return target
    uri = _fallback("MongoDB", connection_id, settings.mongo_uri, "HARVESTER_MONGO_URI")
    return MongoTarget(connection_id, uri, "HARVESTER_MONGO_URI")


def _redis_from_environment(connection_id: str, settings: HarvesterSettings) -> RedisTarget:
    if (target := _environment.redis(connection_id)) is not None:
        return target
    url = _fallback("Redis", connection_id, settings.redis_url, "HARVESTER_REDIS_URL")
    return RedisTarget(connection_id, url, "HARVESTER_REDIS_URL", **sentinel_fields(settings))


def resolve_mongo(connection_id: str, settings: HarvesterSettings) -> MongoTarget:
    """Where ``connection_id`` points: a registered resolver, ``AIRFLOW_CONN_<ID>``, else HARVESTER_MONGO_URI."""
    for resolver in _resolvers:
        if (target := resolver.mongo(connection_id)) is not None:
            return target
    return _mongo_from_environment(connection_id, settings)


def resolve_redis(connection_id: str, settings: HarvesterSettings) -> RedisTarget:
    """Where ``connection_id`` points: a registered resolver, ``AIRFLOW_CONN_<ID>``, else HARVESTER_REDIS_URL."""
    for resolver in _resolvers:
        if (target := resolver.redis(connection_id)) is not None:
            return target
    return _redis_from_environment(connection_id, settings)


def resolve_http(connection_id: str) -> HttpCredentials:
    """The credentials of an HTTP connection (a source's ``http_connection_id``): a registered resolver
    (Airflow's BaseHook inside Airflow), else ``AIRFLOW_CONN_<ID>``. There is no default: a source that
    names a connection nobody defines fails with :class:`ConnectionNotFound`, never runs unauthenticated."""
    for resolver in _resolvers:
        method = getattr(resolver, "http", None)
        if method is not None and (credentials := method(connection_id)) is not None:
            return credentials
    if (credentials := _environment.http(connection_id)) is not None:
        return credentials
    raise ConnectionNotFound(f"no HTTP connection {connection_id!r} (define {ENVIRONMENT_PREFIX}"
                             f"{connection_id.upper()} or an Airflow connection)")


def resolve_filesystem(location: str, connection_id: str | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of a storage URL (``file:///data/archive``, ``s3://bucket/prefix``) and the path
    in it: a registered resolver's (inside Airflow, ``ObjectStoragePath`` with ``connection_id``'s credentials),
    else fsspec's own, whose object-store libraries read their credentials from the environment. Core code
    writes through this and never imports Airflow."""
    for resolver in _resolvers:
        method = getattr(resolver, "filesystem", None)
        if method is not None and (found := method(location, connection_id)) is not None:
            return found
    from fsspec.core import url_to_fs  # imported here: most processes never touch files

    return url_to_fs(location)


async def _aresolve(kind: str, connection_id: str) -> Any:
    """The first registered resolver's target for ``connection_id``: its ``a<kind>`` method awaited where it
    has one (an Airflow resolver in the triggerer), else its ``<kind>`` method; None when none knows the id."""
    for resolver in _resolvers:
        method = getattr(resolver, f"a{kind}", None)
        target = await method(connection_id) if method is not None else getattr(resolver, kind)(connection_id)
        if target is not None:
            return target
    return None


async def aresolve_mongo(connection_id: str, settings: HarvesterSettings) -> MongoTarget:
    """:func:`resolve_mongo` for an event loop (the triggerer): a resolver's ``amongo`` is awaited."""
    target: MongoTarget | None = await _aresolve("mongo", connection_id)
    return target if target is not None else _mongo_from_environment(connection_id, settings)


async def aresolve_redis(connection_id: str, settings: HarvesterSettings) -> RedisTarget:
    """:func:`resolve_redis` for an event loop (the triggerer): a resolver's ``aredis`` is awaited."""
    target: RedisTarget | None = await _aresolve("redis", connection_id)
    return target if target is not None else _redis_from_environment(connection_id, settings)


