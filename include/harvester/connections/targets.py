"""What a connection id points at: the fields of an Airflow connection read without Airflow, and what they
mean for each kind of client (a MongoDB URI, a redis-py URL, a site's HTTP credentials), read as the
provider's hook reads them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit, urlunsplit

from harvester.settings import HarvesterSettings

_REDIS_SSL_EXTRAS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_keyfile", "ssl_certfile", "ssl_check_hostname")


SECRET_KEYS = frozenset({"password", "passwd", "pwd", "pass", "sentinel_password", "secret", "client_secret",
                         "token", "access_token", "api_key", "apikey", "access_key", "secret_key", "private_key",
                         "auth", "authorization", "x-api-key", "tlscertificatekeyfilepassword"})
MASK = "***"


def _secret_key(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_KEYS or lowered.endswith(("password", "_secret", "_token"))


def redact(text: str) -> str:
    """``text`` safe to print or log: a URI's password (its user info) and the values of password-like query keys
    (``?password=``, ``&sentinel_password=``, ``token``...) masked, or, for an Airflow connection in its JSON form,
    the ``password`` and every secret-like key of its extras masked and the URIs inside it redacted the same way.
    The one redactor every printout uses, so a new form of a secret is taught here once."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except ValueError:
            return _redact_uri(text)
        return json.dumps(_redact_value(document)) if isinstance(document, dict) else _redact_uri(text)
    return _redact_uri(text)


def _redact_value(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {name: _redact_value(item, str(name)) for name, item in value.items()}
    if isinstance(value, list):
        return [_redact_value(item, key) for item in value]
    if key and _secret_key(key) and value not in (None, ""):
        return MASK
    return _redact_uri(value) if isinstance(value, str) else value


def _redact_uri(uri: str) -> str:
    if "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri.split("://", 1)[0] + "://" + MASK  # unreadable: nothing of it is printed
    netloc = parts.netloc
    if "@" in netloc:
        user_info, host = netloc.rsplit("@", 1)
        user = user_info.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{host}" if ":" in user_info else f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret_key(name) for name, _ in pairs):
            query = "&".join(f"{quote_plus(name)}={MASK if _secret_key(name) else quote_plus(value)}"
                             for name, value in pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


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


