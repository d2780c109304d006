"""Which addresses a crawl may reach: server-side request forgery defences for redirects and links.

A site we do not control can redirect us, or link us, to ``http://169.254.169.254/`` (cloud metadata),
``http://127.0.0.1:6379/`` (our own Redis) or a private network; what we fetched would then be stored
as the site's content. Every request URL, every redirect hop and every discovered link is checked
here: the host is resolved (on the event loop's resolver, never blocking it) and refused when any
address it resolves to is loopback, link-local, private, multicast, reserved or unspecified, unless
``HARVESTER_ALLOWED_PRIVATE_NETWORKS`` lists its network (optionally with a port: the local demo
site is ``127.0.0.1/32:8008``). After connecting, the fetcher checks the peer address too, so a name
that resolved to a public address and then to a private one (DNS rebinding) is still refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from harvester.errors import AddressRefused
from harvester.urls import DEFAULT_PORTS

if TYPE_CHECKING:
    from harvester.settings import HarvesterSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
FETCHABLE_SCHEMES = frozenset({"http", "https"})
RESOLUTION_MEMORY_SECONDS = 60.0  # how long a host and port's verdict is reused (requests and links)
TOO_MANY_HOSTS = "too many distinct hosts"  # link screening's refusals, counted apart by the follower
SCREENING_TIMEOUT = "screening time budget spent"


@dataclass(frozen=True, slots=True)
class AllowedNetwork:
    """One allow-listed network, on every port or on one."""

    network: IPNetwork
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> AllowedNetwork:
        """``127.0.0.1/32``, ``10.0.0.0/8:8080``, ``[::1/128]:8008``, or a bare address."""
        text = text.strip()
        port: int | None = None
        if text.startswith("["):
            inside, _, rest = text[1:].partition("]")
            text, port = inside, int(rest[1:]) if rest.startswith(":") else None
        elif text.count(":") == 1:
            text, port_text = text.split(":")
            port = int(port_text)
        return cls(ipaddress.ip_network(text, strict=False), port)

    def allows(self, address: IPAddress, port: int) -> bool:
        return address.version == self.network.version and address in self.network and self.port in (None, port)


def parse_allowed_networks(value: str) -> tuple[AllowedNetwork, ...]:
    return tuple(AllowedNetwork.parse(item) for item in value.split(",") if item.strip())


NAT64_NETWORKS = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries to a router that unwraps it: IPv4-mapped, 6to4
    (2002::/16), Teredo (2001::/32: its server and its client) and NAT64 (64:ff9b::/96, 64:ff9b:1::/48, the
    last 32 bits). A packet to such an address reaches the embedded one, so that is the one to check."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)
    if any(address in network for network in NAT64_NETWORKS):
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


def embedded_problem(address: IPAddress) -> str | None:
    """Why an address that embeds IPv4 addresses may not be reached (None: every embedded one is public), or
    None when it embeds none."""
    for inner in embedded_ipv4(address):
        if (problem := address_problem(inner)) is not None:
            return f"{problem} (it embeds {inner})"
    return None


def address_problem(address: IPAddress) -> str | None:
    """Why an address is not a public one a crawler may reach (None: it is)."""
    if embedded_ipv4(address):
        return embedded_problem(address)
    for name in ("loopback", "link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if not address.is_global:
        return "not global"
    return None


def name_refusal(host: str) -> str | None:
    """Names refused as written, before any lookup (the browser's guard): ``localhost`` and ``*.localhost``
    (Chromium answers them with loopback itself, whatever DNS says) and names ending in a dot (``localhost.``,
    ``example.com.``: a spelling resolvers and browsers read differently)."""
    name = host.lower().strip("[]")
    if name.endswith("."):
        return f"name refused: {host} ends with a dot"
    if name == "localhost" or name.endswith(".localhost"):
        return f"name refused: {host} is a loopback name"
    return None


async def resolved_addresses(host: str, port: int) -> list[IPAddress]:
    """``host``'s addresses, each once (a literal address is its own), by the event loop's resolver (a thread
    pool: the loop never blocks on DNS); raises ``socket.gaierror`` (or ``UnicodeError``) when it does not
    resolve. The one lookup of the guard: the fetcher's checks and the browser guard's pinned addresses."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))


def strip_userinfo(url: str) -> str:
    """The URL without ``user:password@``: credentials in links are never sent (nor stored)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[1], parts.path, parts.query, parts.fragment))


class AddressGuard:
    """Refuses URLs that point at addresses the crawl must not reach (see the module docstring)."""

    def __init__(self, allowed: tuple[AllowedNetwork, ...] = ()) -> None:
        self.allowed = allowed
        self._remembered: dict[tuple[str, int], tuple[float, str | None]] = {}

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> AddressGuard:
        return cls(parse_allowed_networks(settings.allowed_private_networks))

    def address_refusal(self, address: IPAddress, port: int) -> str | None:
        """Why connecting to ``address``:``port`` is refused, or None."""
        problem = address_problem(address)
        if problem is None or any(network.allows(address, port) for network in self.allowed):
            return None
        return f"address refused: {address} is {problem} (HARVESTER_ALLOWED_PRIVATE_NETWORKS does not list it)"

    @staticmethod
    def split(url: str) -> tuple[str, str, int]:
        """Scheme, host and port of a URL we may fetch; raises :class:`AddressRefused` for other schemes."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise AddressRefused(f"invalid URL: {error}") from None
        scheme = parts.scheme.lower()
        if scheme not in FETCHABLE_SCHEMES:
            raise AddressRefused(f"scheme refused: {scheme or 'none'}:// is not http(s)")
        if not parts.hostname:
            raise AddressRefused("invalid URL: no host")
        return scheme, parts.hostname, port or DEFAULT_PORTS[scheme]

    def literal_refusal(self, url: str) -> str | None:
        """The refusal a URL earns without a DNS lookup (its scheme, or a literal IP address), or None."""
        try:
            _, host, port = self.split(url)
        except AddressRefused as refused:
            return str(refused)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None
        return self.address_refusal(address, port)

    async def check(self, url: str, remember: bool = False) -> None:
        """Raise :class:`AddressRefused` unless every address ``url``'s host resolves to may be fetched.
        Resolution runs on the loop's resolver (a thread pool), so the event loop never blocks on DNS.
        ``remember``: reuse a host and port's verdict for :data:`RESOLUTION_MEMORY_SECONDS`, so a crawl does
        not resolve its site once per request. Only for callers that also check the connected peer of
        every new connection (the HTTP fetcher), so a name that later resolves elsewhere (DNS rebinding)
        is still refused; the browser's route cannot see its peer and resolves every time."""
        _, host, port = self.split(url)
        if remember:
            reason = await self._origin_refusal(host.lower(), port)
        else:
            reason, _ = await self._resolved_refusal(host, port)
        if reason is not None:
            raise AddressRefused(reason)

    async def checked_addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses ``host`` resolves to, resolved ONCE, when every one of them may be reached: the
        browser's guard connects to exactly these (nobody resolves the name again, so it cannot rebind).
        Fails closed: a refused name, a name that does not resolve, or any refused address raises
        :class:`AddressRefused`."""
        if (reason := name_refusal(host)) is not None:
            raise AddressRefused(reason)
        try:
            addresses = await resolved_addresses(host, port)
        except (socket.gaierror, UnicodeError) as error:
            raise AddressRefused(f"name refused: {host} does not resolve ({error})") from None
        if not addresses:
            raise AddressRefused(f"name refused: {host} resolves to no address")
        if (reason := self._first_refusal(host, addresses, port)) is not None:
            raise AddressRefused(reason)
        return addresses

    async def _resolved_refusal(self, host: str, port: int) -> tuple[str | None, bool]:
        """Why ``host``:``port`` is refused (None: it is not), and whether that verdict may be remembered
        (not when the name did not resolve: the next request asks again)."""
        try:
            addresses = await resolved_addresses(host, port)
        except (socket.gaierror, UnicodeError):
            return None, False  # not refused: the connection then fails as a (retryable) connection error
        return self._first_refusal(host, addresses, port), True

    def _first_refusal(self, host: str, addresses: list[IPAddress], port: int) -> str | None:
        """The refusal of the first of ``host``'s addresses that is refused (its name said when it is one)."""
        for address in addresses:
            if (reason := self.address_refusal(address, port)) is not None:
                return f"{host}: {reason}" if str(address) != host.strip("[]") else reason
        return None

    def check_peer(self, peer: object, port: int) -> None:
        """Raise :class:`AddressRefused` when the connected peer (a socket's ``getpeername()``) is refused, or
        cannot be told (no peer name, or one that is not an IP address): the check fails closed."""
        if not isinstance(peer, tuple) or not peer:
            raise AddressRefused("connected to an address that cannot be told (no peer name): refused")
        try:
            address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
        except ValueError:
            raise AddressRefused(f"connected to {str(peer[0])[:100]!r}, not an IP address: refused") from None
        if (reason := self.address_refusal(address, port)) is not None:
            raise AddressRefused(f"connected to {reason}")

    async def refusals(self, urls: list[str], max_hosts: int | None = None,
                       budget_seconds: float | None = None) -> dict[str, str]:
        """URL → reason for each of ``urls`` that is refused; each distinct host and port is resolved once,
        concurrently, and remembered for :data:`RESOLUTION_MEMORY_SECONDS`.

        Bounded (one page must not make a worker resolve without end): only the first ``max_hosts`` distinct
        hosts are looked up (links to the others are refused, :data:`TOO_MANY_HOSTS`), and lookups still
        running after ``budget_seconds`` are cancelled (their links refused, :data:`SCREENING_TIMEOUT`)."""
        by_origin: dict[tuple[str, int], list[str]] = {}
        refused: dict[str, str] = {}
        for url in urls:
            try:
                _, host, port = self.split(url)
            except AddressRefused as error:
                refused[url] = str(error)
                continue
            by_origin.setdefault((host.lower(), port), []).append(url)
        origins = list(by_origin)
        hosts = list(dict.fromkeys(host for host, _ in origins))
        if max_hosts is not None and len(hosts) > max_hosts:
            kept = set(hosts[:max_hosts])
            reason = f"{TOO_MANY_HOSTS}: the page links more than {max_hosts} distinct hosts"
            for origin in [origin for origin in origins if origin[0] not in kept]:
                refused.update(dict.fromkeys(by_origin.pop(origin), reason))
            origins = list(by_origin)
        for origin, reason in zip(origins, await self._bounded_refusals(origins, budget_seconds), strict=True):
            if reason is not None:
                refused.update(dict.fromkeys(by_origin[origin], reason))
        return refused

    async def _bounded_refusals(self, origins: list[tuple[str, int]], budget_seconds: float | None) -> list[str | None]:
        """Each origin's refusal, those not decided within ``budget_seconds`` refused (fail closed)."""
        lookups = [asyncio.ensure_future(self._origin_refusal(host, port)) for host, port in origins]
        if not lookups:
            return []
        _, pending = await asyncio.wait(lookups, timeout=budget_seconds)
        for lookup in pending:
            lookup.cancel()
        reason = f"{SCREENING_TIMEOUT}: not resolved within {budget_seconds or 0:g}s"
        return [reason if lookup in pending else lookup.result() for lookup in lookups]

    async def _origin_refusal(self, host: str, port: int) -> str | None:
        """``host``:``port``'s refusal (None: allowed), from memory when resolved within the last
        :data:`RESOLUTION_MEMORY_SECONDS`."""
        now = time.monotonic()
        remembered = self._remembered.get((host, port))
        if remembered is not None and now - remembered[0] < RESOLUTION_MEMORY_SECONDS:
            return remembered[1]
        reason, lasting = await self._resolved_refusal(host, port)
        if lasting:
            if len(self._remembered) > 10_000:
                self._remembered.clear()
            self._remembered[(host, port)] = (now, reason)
        return reason
