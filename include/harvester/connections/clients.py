"""Building clients: every MongoClient and redis client of Harvester, with the options of this one place,
cached per process id (pymongo and redis pools do not survive a fork: a Celery prefork child makes its own)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from harvester.connections.resolution import MONGO_DEFAULT, REDIS_DEFAULT, resolve_mongo, resolve_redis
from harvester.connections.targets import MongoTarget, RedisTarget, sentinel_fields
from harvester.errors import MongoUnavailableError
from harvester.settings import HarvesterSettings

if TYPE_CHECKING:  # the clients load when first asked for: DAG files import this module on every parse
    import pymongo
    import redis

# Client options, in this one place. Connection extras may override the MongoDB ones (as MongoHook lets them).
MONGO_CONNECT_TIMEOUT_MS = 10_000
MONGO_SOCKET_TIMEOUT_MS = 120_000  # a bulk_write of a large batch on the slow stand-in still fits
REDIS_SOCKET_TIMEOUT_SECONDS = 30.0
REDIS_CONNECT_TIMEOUT_SECONDS = 10.0
REDIS_HEALTH_CHECK_SECONDS = 30
BLOCKING_MARGIN_SECONDS = 10.0  # a blocking read's socket outlasts the longest block by this much
# Redis commands are not retried by the client: a Lua admission whose reply was lost would reserve
# capacity twice. Callers wait outages out themselves (the distributor backs off, leases expire).
REDIS_CLIENT_RETRIES = 0

MONGO_CLIENT_OPTIONS: dict[str, Any] = {
    "connectTimeoutMS": MONGO_CONNECT_TIMEOUT_MS,
    "socketTimeoutMS": MONGO_SOCKET_TIMEOUT_MS,
    "tz_aware": True,
}


def mongo_client_options(settings: HarvesterSettings) -> dict[str, Any]:
    """The options of every MongoClient: bounded waits, and tz-aware datetimes (harvest times are UTC)."""
    return {"serverSelectionTimeoutMS": settings.producer_mongo_timeout_ms, **MONGO_CLIENT_OPTIONS}


def redis_client_options(socket_timeout: float = REDIS_SOCKET_TIMEOUT_SECONDS) -> dict[str, Any]:
    """The options of every redis client: bounded waits, a health check on idle connections, no blind retry."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
        "health_check_interval": REDIS_HEALTH_CHECK_SECONDS,
        "retry": Retry(NoBackoff(), REDIS_CLIENT_RETRIES),
    }


def open_mongo_client(target: MongoTarget | str, settings: HarvesterSettings | None = None,
                      **overrides: Any) -> pymongo.MongoClient:
    """A new, uncached client the caller closes (readiness probes, short-lived tools); ``overrides``
    win over the connection's options, which win over :func:`mongo_client_options`. Without ``settings``
    (a probe that names its own waits in ``overrides``) only the fixed options apply."""
    import pymongo

    if isinstance(target, str):
        target = MongoTarget("(uri)", target, "a URI")
    options = MONGO_CLIENT_OPTIONS if settings is None else mongo_client_options(settings)
    return pymongo.MongoClient(target.uri, **{**options, **target.options, **overrides})


def open_redis_client(target: RedisTarget | str, **overrides: Any) -> redis.Redis:
    """A new, uncached client the caller closes. ``from_url`` picks the connection class from the
    scheme, so ``rediss://`` is TLS and ``unix://`` a socket."""
    import redis

    if isinstance(target, str):
        target = RedisTarget("(url)", target, "a URL")
    if target.sentinels:
        return open_sentinel_client(target, **overrides)
    return redis.Redis.from_url(target.url, **{**redis_client_options(), **target.options, **overrides})


def open_sentinel_client(target: RedisTarget, **overrides: Any) -> redis.Redis:
    """A client of the primary the target's sentinels name (redis-py's ``Sentinel.master_for``). Its
    connections ask the sentinels for the primary's address whenever they connect, and drop a connection
    that meets a demoted primary (READONLY), so after a failover the next command reaches the new primary;
    the command in flight when the old one died fails (no blind retry, as for every client here)."""
    from redis.connection import SSLConnection, parse_url
    from redis.sentinel import Sentinel

    kwargs = parse_url(target.url)
    for name in ("host", "port", "path"):
        kwargs.pop(name, None)
    if kwargs.pop("connection_class", None) is SSLConnection:
        kwargs["ssl"] = True
    options = {**redis_client_options(), **target.options, **overrides}
    sentinel_options = {name: options[name] for name in ("socket_timeout", "socket_connect_timeout")}
    if target.sentinel_password:
        sentinel_options["password"] = target.sentinel_password
    manager = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options)
    return manager.master_for(target.sentinel_master, **{**kwargs, **options})


def celery_broker(settings: HarvesterSettings) -> tuple[str, dict[str, Any]]:
    """The Celery broker URL of HARVESTER_REDIS_URL and the transport options it needs: with sentinels,
    kombu's ``sentinel://`` transport (one ``sentinel://`` URL per sentinel, the primary's password and
    database from the Redis URL) and its ``master_name``; kombu finds the new primary after a failover.
    A ``rediss://`` URL with sentinels is refused rather than sent in the clear: kombu's sentinel transport
    would talk plain TCP to the primary."""
    fields = sentinel_fields(settings)
    if not fields:
        return settings.redis_url, {}
    parts = urlsplit(settings.redis_url)
    if parts.scheme != "redis":
        raise ValueError(f"HARVESTER_REDIS_SENTINELS needs a redis:// HARVESTER_REDIS_URL for the Celery broker, "
                         f"not {parts.scheme}:// (kombu's sentinel transport does not speak TLS to the primary)")
    credentials = parts.netloc.rpartition("@")[0]
    credentials = f"{credentials}@" if credentials else ""
    database = parts.path or "/0"
    url = ";".join(f"sentinel://{credentials}{host}:{port}{database}" for host, port in fields["sentinels"])
    options: dict[str, Any] = {"master_name": fields["sentinel_master"]}
    if fields["sentinel_password"]:
        options["sentinel_kwargs"] = {"password": fields["sentinel_password"]}
    return url, options


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def _cached(key: tuple[Any, ...], build: Any) -> Any:
    key = (os.getpid(), *key)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = build()
        return client


def mongo_client(connection_id: str = MONGO_DEFAULT, *, settings: HarvesterSettings) -> pymongo.MongoClient:
    """This process's client of ``connection_id`` (made on first use, shared by its threads)."""
    target = resolve_mongo(connection_id, settings)
    return mongo_client_for(target, settings)


def mongo_client_for(target: MongoTarget, settings: HarvesterSettings) -> pymongo.MongoClient:
    """This process's client of an already resolved target (the triggerer resolves asynchronously)."""
    return _cached(("mongo", *target.cache_key()), lambda: open_mongo_client(target, settings))


def redis_client(connection_id: str = REDIS_DEFAULT, *, settings: HarvesterSettings,
                 blocking_seconds: float | None = None) -> redis.Redis:
    """This process's client of ``connection_id``. ``blocking_seconds``: a separate client for blocking
    reads (BLPOP) that long, whose socket timeout outlasts them."""
    return redis_client_for(resolve_redis(connection_id, settings), blocking_seconds=blocking_seconds)


def redis_client_for(target: RedisTarget, *, blocking_seconds: float | None = None) -> redis.Redis:
    overrides = {} if blocking_seconds is None else {"socket_timeout": blocking_seconds + BLOCKING_MARGIN_SECONDS}
    return _cached(("redis", *target.cache_key(), blocking_seconds),
                   lambda: open_redis_client(target, **overrides))


def blocking_twin(client: redis.Redis, blocking_seconds: float) -> redis.Redis:
    """A client on the same server as ``client`` (same connection class: TLS and unix sockets kept)
    with its own pool, for blocking reads of up to ``blocking_seconds``."""
    import redis
    from redis.sentinel import SentinelConnectionPool

    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "socket_timeout": blocking_seconds + BLOCKING_MARGIN_SECONDS}
    if isinstance(pool, SentinelConnectionPool):  # the same sentinels' primary, through a pool of its own
        kwargs.pop("connection_pool")
        return pool.sentinel_manager.master_for(pool.service_name, connection_class=pool.connection_class,
                                                **kwargs)
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))


def close_clients() -> None:
    """Close and forget this process's cached clients (tests; a process about to exit)."""
    with _clients_lock:
        mine = [key for key in _clients if key[0] == os.getpid()]
        for key in mine:
            with contextlib.suppress(Exception):  # a client whose server is gone still leaves the cache
                _clients.pop(key).close()


@contextlib.contextmanager
def clear_mongo_errors(target: MongoTarget) -> Iterator[None]:
    """Turn pymongo's long connection errors into one line naming the server (password hidden)."""
    from pymongo.errors import ConnectionFailure, ServerSelectionTimeoutError

    try:
        yield
    except (ServerSelectionTimeoutError, ConnectionFailure) as error:
        first_line = str(error).split(",")[0].splitlines()[0][:200]
        raise MongoUnavailableError(
            f"MongoDB unreachable at {target.redacted} ({target.via}): {first_line}"
        ) from None
