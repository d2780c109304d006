"""Each country's forward proxy: a page serves one country because it browses through that country's proxy.

A proxy is an Airflow connection, never YAML: connection id ``proxy_<country>`` (``proxy_sg``), which
Airflow and every Harvester process read from the environment as ``AIRFLOW_CONN_PROXY_SG`` (a URI such
as ``http://user:secret@proxy.example:3128``, or Airflow's JSON form). Slot hosts are Celery workers,
not Airflow, so the environment is what they read. The bytes each proxy carried are counted by the slot
hosts and read here (:func:`proxy_bytes_by_country`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from harvester.errors import PageSlotError, redis_storage_errors
from harvester.redis_keys import PageSlotKeys
from harvester.redis_scripts import text


class ProxyNotConfigured(PageSlotError):
    """A country has browser work but no proxy; its pages must not open."""

    def __init__(self, country: str) -> None:
        self.country = country
        super().__init__(
            f"no proxy configured for country {country}: set the Airflow connection {proxy_connection_id(country)} "
            f"(environment {proxy_environment_variable(country)}, e.g. http://user:password@proxy:3128); "
            "pages of this country are never opened without it")


def proxy_connection_id(country: str) -> str:
    return f"proxy_{country.lower()}"


def proxy_environment_variable(country: str) -> str:
    return f"AIRFLOW_CONN_{proxy_connection_id(country).upper()}"


@dataclass(frozen=True)
class Proxy:
    """What Playwright needs to browse through a proxy (``server`` without the credentials)."""

    country: str
    server: str
    username: str | None = None
    password: str | None = None
    connection_id: str = ""  # the Airflow connection it came from (a pool's member, harvester.pageslots.proxy_pool)

    def playwright(self) -> dict[str, str]:
        options = {"server": self.server}
        if self.username:
            options["username"] = self.username
            options["password"] = self.password or ""
        return options

    def __repr__(self) -> str:  # never log the password
        return f"Proxy({self.country}, {self.server}, user={self.username!r})"


def parse_proxy(country: str, value: str, connection_id: str = "") -> Proxy:
    """An Airflow connection value, URI or JSON, read by the connection factory's parser."""
    from harvester.connections import ConnectionFields

    fields = ConnectionFields.from_environment_value(value)
    if not fields.host:
        raise ValueError(f"{proxy_environment_variable(country)}: the connection names no proxy host")
    scheme = fields.conn_type if fields.conn_type in ("http", "https", "socks5", "socks4") else "http"
    port = f":{fields.port}" if fields.port else ""
    return Proxy(country, f"{scheme}://{fields.host}{port}", fields.login, fields.password,
                 connection_id or proxy_connection_id(country))


def proxy_for(country: str, environ: Mapping[str, str] | None = None) -> Proxy | None:
    """The country's proxy, or None when none is configured."""
    value = (environ if environ is not None else os.environ).get(proxy_environment_variable(country))
    return parse_proxy(country, value) if value else None


def require_proxy(country: str, allow_direct: bool, environ: Mapping[str, str] | None = None) -> Proxy | None:
    """The country's proxy; None only when direct connections are allowed (local demos); else raise."""
    proxy = proxy_for(country, environ)
    if proxy is None and not allow_direct:
        raise ProxyNotConfigured(country)
    return proxy


@redis_storage_errors()
def proxy_bytes_by_country(client: redis.Redis) -> dict[str, int]:
    """Bytes browsed through each country's proxy, as the slot hosts count them (``country:<C>`` fields)."""
    prefix = "country:"
    counts = ((text(name), amount) for name, amount in client.hgetall(PageSlotKeys().proxy_bytes).items())
    return {name[len(prefix):]: int(amount) for name, amount in counts if name.startswith(prefix)}
