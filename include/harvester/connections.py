"""The one connection factory: a connection id in, one cached MongoDB or Redis client out (Airflow-hook style).

Every MongoClient and redis client of Harvester is built here, so the client options (timeouts,
tz-aware datetimes, retries) are the same in the Airflow tasks, the triggerer, the workers, the
distributor and the CLI, and a source's ``output.connection_id`` means the same server everywhere.

How an id resolves, first answer wins:

1. resolvers registered with :func:`register_resolver` (inside Airflow, ``harvester.airflow``
   registers one that asks MongoHook / BaseHook, so the Airflow UI's connections apply);
2. the environment variable ``AIRFLOW_CONN_<ID>`` in Airflow's URI or JSON form (compose sets them);
3. the default: ``HARVESTER_MONGO_URI`` / ``HARVESTER_REDIS_URL`` (a plain pymongo / redis-py URL,
   ``rediss://`` and ``unix://`` included), so a bare machine and ``airflow dags test`` still run.

This module never imports Airflow: it is a leaf every component may use. Clients are cached per
process id (pymongo and redis pools do not survive a fork: a Celery prefork child makes its own).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit, urlunsplit

from harvester.errors import ConnectionNotFound, MongoUnavailableError
from harvester.settings import HarvesterSettings

if TYPE_CHECKING:  # the clients load when first asked for: DAG files import this module on every parse
    import pymongo
    import redis

log = logging.getLogger(__name__)

MONGO_DEFAULT = "mongo_default"
REDIS_DEFAULT = "redis_default"
ENVIRONMENT_PREFIX = "AIRFLOW_CONN_"

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

_REDIS_SSL_EXTRAS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_keyfile", "ssl_certfile", "ssl_check_hostname")


def redact(uri: str) -> str:
    """Hide a password in a URI before it is printed or logged."""
    if "@" not in uri or "://" not in uri:
        return uri
    scheme, rest = uri.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


# -- what an id points at ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ConnectionFields:
    """The fields of an Airflow connection, read without Airflow (``AIRFLOW_CONN_<ID>`` values)."""

    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_uri(cls, uri: str) -> ConnectionFields:
        """Parse as Airflow's ``Connection(uri=...)`` does (query parameters become the extras,
        or ``__extra__`` holds them as JSON)."""
        parts = urlsplit(uri)
        conn_type = parts.scheme.replace("-", "_")
        if conn_type == "postgresql":
            conn_type = "postgres"
        extra: dict[str, Any] = {}
        if parts.query:
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            extra = json.loads(query["__extra__"]) if "__extra__" in query else query
        schema = unquote(parts.path[1:]) if parts.path[1:] else None
        return cls(
            conn_type=conn_type, host=unquote(parts.hostname) if parts.hostname else None, port=parts.port,
            login=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None, schema=schema, extra=extra,
        )

    @classmethod
    def from_json(cls, text: str) -> ConnectionFields:
        data = json.loads(text)
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra.strip() else {}
        port = data.get("port")
        return cls(conn_type=str(data.get("conn_type") or ""), host=data.get("host"),
                   port=int(port) if port not in (None, "") else None, login=data.get("login"),
                   password=data.get("password"), schema=data.get("schema"), extra=extra)

    @classmethod
    def from_environment_value(cls, value: str) -> ConnectionFields:
        """JSON when it starts with ``{`` (as Airflow decides), else a connection URI."""
        value = value.strip()
        return cls.from_json(value) if value.startswith("{") else cls.from_uri(value)


@dataclass(frozen=True)
class ConnectionTarget:
    """Where a connection id points: the client's address, the connection's client options, and where it
    came from. One shape for both backends; the subclasses only name the address as their client does."""

    connection_id: str
    address: str
    via: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def redacted(self) -> str:
        return redact(self.address)

    def cache_key(self) -> tuple[str, str]:
        return self.address, json.dumps(dict(self.options), sort_keys=True, default=str)


class MongoTarget(ConnectionTarget):
    """A pymongo URI (``mongodb://``, ``mongodb+srv://``) and MongoClient options."""

    @property
    def uri(self) -> str:
        return self.address


@dataclass(frozen=True)
class RedisTarget(ConnectionTarget):
    """A redis-py URL (``redis://``, ``rediss://``, ``unix://``) and client options; with ``sentinels``, the
    primary is whichever server those Redis Sentinels name for ``sentinel_master`` (the URL then gives only
    the password, database and TLS), asked again whenever a connection to it fails."""

    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str = ""
    sentinel_password: str = field(default="", repr=False)

    @property
    def url(self) -> str:
        return self.address

    @property
    def redacted(self) -> str:
        if not self.sentinels:
            return redact(self.address)
        sentinels = format_sentinels(self.sentinels)
        return f"{redact(self.address)} (primary {self.sentinel_master!r} of sentinels {sentinels})"

    def cache_key(self) -> tuple[str, str]:
        address, options = super().cache_key()
        return address, json.dumps([options, self.sentinels, self.sentinel_master, self.sentinel_password])


def parse_sentinels(value: str | list[Any] | tuple[Any, ...]) -> tuple[tuple[str, int], ...]:
    """``"host:port,host:port"`` (or a list of ``host:port``) as redis-py's Sentinel takes them."""
    items = value.split(",") if isinstance(value, str) else [str(item) for item in value]
    sentinels = []
    for item in (item.strip() for item in items):
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a Redis Sentinel is host:port, not {item!r}")
        sentinels.append((host.strip("[]"), int(port)))
    return tuple(sentinels)


def format_sentinels(sentinels: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"{host}:{port}" for host, port in sentinels)


def sentinel_fields(settings: HarvesterSettings) -> dict[str, Any]:
    """The sentinel part of HARVESTER_REDIS_URL's target (nothing when ``redis_sentinels`` is empty)."""
    if not settings.redis_sentinels.strip():
        return {}
    return {"sentinels": parse_sentinels(settings.redis_sentinels), "sentinel_master": settings.redis_sentinel_master,
            "sentinel_password": settings.redis_sentinel_password}


def _true(value: Any) -> bool:
    return str(value).lower() == "true"


def mongo_target_from_fields(connection_id: str, fields: ConnectionFields, via: str) -> MongoTarget:
    """The URI and options MongoHook would give MongoClient for this connection (its extras kept)."""
    extras = dict(fields.extra)
    srv = _true(extras.pop("srv", False)) or fields.conn_type == "mongodb+srv"
    netloc = fields.host or ""
    if fields.login is not None and fields.password is not None:
        netloc = f"{quote_plus(fields.login)}:{quote_plus(fields.password)}@{netloc}"
    if fields.port:
        netloc = f"{netloc}:{fields.port}"
    path = f"/{fields.schema}" if fields.schema else ""
    uri = urlunsplit(("mongodb+srv" if srv else "mongodb", netloc, path, "", ""))
    allow_insecure = _true(extras.pop("allow_insecure", "false"))
    if allow_insecure and (_true(extras.get("ssl", "false")) or _true(extras.get("tls", "false"))):
        extras.pop("ssl", None)
        extras["tlsAllowInvalidCertificates"] = True
    return MongoTarget(connection_id, uri, via, extras)


def redis_target_from_fields(connection_id: str, fields: ConnectionFields, via: str) -> RedisTarget:
    """The redis-py URL of an Airflow Redis connection, read as RedisHook reads it (``db`` and the ssl
    options from the extras), plus what RedisHook cannot say: conn_type ``rediss`` means TLS and
    ``unix`` a socket path (``unix:///run/redis.sock``). The URI's path also gives the db (``/0``)."""
    extras = dict(fields.extra)
    if _true(extras.get("cluster", False)):
        raise ValueError(f"Redis connection {connection_id!r} is a cluster connection; Harvester needs one "
                         "primary (the Lua scripts keep each source's keys in one hash slot)")
    password = None if str(fields.password).lower() in ("none", "false", "") else fields.password
    auth = ""
    if fields.login or password:
        auth = quote(fields.login or "", safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    options = {name: extras[name] for name in _REDIS_SSL_EXTRAS if name in extras}
    sentinel = {}
    if extras.get("sentinels"):  # the connection's host is then ignored: the sentinels name the primary
        sentinel = {"sentinels": parse_sentinels(extras["sentinels"]),
                    "sentinel_master": str(extras.get("sentinel_master") or "harvester"),
                    "sentinel_password": str(extras.get("sentinel_password") or "")}
    if fields.conn_type == "unix":
        path = "/" + (fields.schema or "").lstrip("/")
        db = extras.get("db", 0)
        return RedisTarget(connection_id, f"unix://{auth}{path}?db={db}", via, options)
    database = extras.get("db")
    if database is None:
        database = fields.schema if fields.schema and fields.schema.isdigit() else 0
    tls = fields.conn_type == "rediss" or _true(extras.get("ssl", False))
    netloc = f"{auth}{fields.host or '127.0.0.1'}:{fields.port or 6379}"
    return RedisTarget(connection_id, f"{'rediss' if tls else 'redis'}://{netloc}/{database}", via, options,
                       **sentinel)


@dataclass(frozen=True)
class HttpCredentials:
    """What a site's requests carry from an Airflow HTTP connection: basic auth (login and password),
    and headers and cookies from its extras. Its repr hides every value: it is never logged."""

    connection_id: str
    via: str
    auth: tuple[str, str] | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    cookies: Mapping[str, str] = field(default_factory=dict, repr=False)
    origin: tuple[str, str, int] | None = None  # (scheme, host, port) of the connection's host, None: it names none

    def __repr__(self) -> str:
        parts = (["basic auth"] if self.auth else []) + [f"{len(self.headers)} headers", f"{len(self.cookies)} cookies"]
        return f"HttpCredentials({self.connection_id!r} via {self.via}: {', '.join(parts)})"

    __str__ = __repr__


def _mapping(value: Any, what: str, connection_id: str) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"HTTP connection {connection_id!r}: extra {what!r} is not a JSON object") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"HTTP connection {connection_id!r}: extra {what!r} is not an object")
    return {str(key): str(item) for key, item in value.items()}


def http_credentials_from_fields(connection_id: str, fields: ConnectionFields, via: str) -> HttpCredentials:
    """Read an HTTP connection as Airflow's HttpHook does: login and password are basic auth; the extras
    ``headers`` and ``cookies`` (objects, or JSON text) are sent as they are, and any other extra is a header."""
    extras = dict(fields.extra)
    headers = _mapping(extras.pop("headers", None), "headers", connection_id)
    cookies = _mapping(extras.pop("cookies", None), "cookies", connection_id)
    for key, value in extras.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            headers.setdefault(str(key), str(value))
    auth = (fields.login, fields.password or "") if fields.login else None
    return HttpCredentials(connection_id, via, auth, headers, cookies, http_connection_origin(fields))


def http_connection_origin(fields: ConnectionFields) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an HTTP connection's host, read as HttpHook builds its base URL: the host may
    carry its scheme (``https://api.example.com``), else ``schema`` names it (http by default); the port
    defaults to the scheme's. None when the connection names no host."""
    if not fields.host:
        return None
    host = fields.host.strip()
    scheme = (fields.schema or "http").lower()
    port = fields.port
    if "://" in host:
        parts = urlsplit(host)
        scheme, host = parts.scheme.lower() or scheme, parts.hostname or ""
        port = port or parts.port
    host = host.strip("/").lower()
    if not host or scheme not in ("http", "https"):
        return None
    return scheme, host, int(port or (443 if scheme == "https" else 80))


# -- resolving ids ----------------------------------------------------------------------------------
class ConnectionResolver(Protocol):
    """Turns a connection id into a target, or None when it does not know the id."""

    def mongo(self, connection_id: str) -> MongoTarget | None: ...

    def redis(self, connection_id: str) -> RedisTarget | None: ...


class EnvironmentResolver:
    """``AIRFLOW_CONN_<ID>`` variables, in Airflow's URI or JSON form, read without Airflow."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = environ

    def fields(self, connection_id: str) -> tuple[ConnectionFields, str] | None:
        name = ENVIRONMENT_PREFIX + connection_id.upper()
        value = (self.environ if self.environ is not None else os.environ).get(name)
        if not value:
            return None
        return ConnectionFields.from_environment_value(value), f"environment variable {name}"

    def mongo(self, connection_id: str) -> MongoTarget | None:
        found = self.fields(connection_id)
        return mongo_target_from_fields(connection_id, *found) if found else None

    def redis(self, connection_id: str) -> RedisTarget | None:
        found = self.fields(connection_id)
        return redis_target_from_fields(connection_id, *found) if found else None

    def http(self, connection_id: str) -> HttpCredentials | None:
        found = self.fields(connection_id)
        return http_credentials_from_fields(connection_id, *found) if found else None


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


async def aresolve_mongo(connection_id: str, settings: HarvesterSettings) -> MongoTarget:
    """:func:`resolve_mongo` for an event loop (the triggerer): a resolver's ``amongo`` is awaited."""
    for resolver in _resolvers:
        method = getattr(resolver, "amongo", None)
        target = await method(connection_id) if method is not None else resolver.mongo(connection_id)
        if target is not None:
            return target
    return _mongo_from_environment(connection_id, settings)


async def aresolve_redis(connection_id: str, settings: HarvesterSettings) -> RedisTarget:
    """:func:`resolve_redis` for an event loop (the triggerer): a resolver's ``aredis`` is awaited."""
    for resolver in _resolvers:
        method = getattr(resolver, "aredis", None)
        target = await method(connection_id) if method is not None else resolver.redis(connection_id)
        if target is not None:
            return target
    return _redis_from_environment(connection_id, settings)


# -- building clients -------------------------------------------------------------------------------
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
