"""The browser's address guard on the network: a local forward proxy every request of a slot's Chromium takes.

Why a proxy and not only a route: behind a proxy Chromium never resolves the names it loads (its proxy does),
so a check made before Chromium sends a request cannot pin what the proxy then connects to, and
``--host-resolver-rules`` does not apply to proxied requests. Nor does a route see everything: redirect hops,
WebSockets, service workers and requests Chromium makes outside any page. So each slot browser is launched
with this proxy as its only way out (``--proxy-server``, loopback included, and no name resolution of its own),
and the proxy, for every CONNECT tunnel (HTTPS, WebSockets) and every plain-HTTP request:

1. refuses names by what they are (``localhost``, ``*.localhost``, a trailing dot) and resolves the others
   ONCE, refusing unresolvable names (fail closed) and any address the :class:`AddressGuard` refuses;
2. connects to exactly the checked address: directly, or through the country's proxy with ``CONNECT
   <address>:<port>`` (so the country proxy does not resolve the name again: nothing can rebind it);
3. counts the bytes it relays both ways (what went through the country proxy) and remembers its refusals
   for the page that caused them.

A refused plain-HTTP request is answered ``403`` with an ``X-Harvester-Refused`` header (a navigation then
ends ``refused`` with that reason); a refused tunnel is answered ``403`` (Chromium reports a failed tunnel).
The country proxy may be ``http://``, ``https://`` or ``socks5://``; it must allow CONNECT to the sites'
ports (80 as well as 443: squid's default ``SSL_ports`` allows only 443).

The way out is an :class:`UpstreamPool` (a country's pool, ``harvester.pageslots.proxy_pool``): each connection
is tried through its proxies in the order the pool gives for the connection's host, each outcome reported back to
it. A session bound to one proxy of the pool (an HTTP source's cookies, a browser context) goes out through
:meth:`GuardProxy.pinned`: a listener of its own that tries that proxy first, so the guard, its address rules and
its failover stay the same for every session. A proxy that cannot
be reached, or refuses the tunnel itself (407, 403, ...), is a *proxy* failure and the next proxy is tried; a
proxy that answers it cannot reach the site (502, 503, 504) is the site's failure. When every proxy failed, the
answer is ``502`` with an ``X-Harvester-Proxy-Error`` header, and the load ends ``proxy_error``, not a site failure.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ipaddress
import logging
import socket
import struct
import weakref
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from harvester.errors import AddressRefused
from harvester.scraping.fetching import PROXY_ERROR_HEADER, REFUSED_HEADER, AddressGuard, IPAddress

__all__ = ["PROXY_ERROR_HEADER", "REFUSED_HEADER", "GuardProxy", "ProxyPoolExhausted", "SingleUpstream",
           "UpstreamError", "UpstreamPool", "UpstreamProxy"]

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_SECONDS = 15.0
SITE_UNREACHABLE_STATUSES = frozenset({502, 503, 504})  # a proxy's answer that the site, not it, failed
RECENT_REFUSALS = 200


class UpstreamError(OSError):
    """The country proxy could not open the tunnel (its status or a dead connection)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def site_unreachable(self) -> bool:
        """The proxy is alive and answered that it could not reach the site (not the proxy's failure)."""
        return self.status in SITE_UNREACHABLE_STATUSES


class ProxyPoolExhausted(OSError):
    """Every proxy of the pool failed for one connection: the load's outcome is ``proxy_error``."""


@dataclass(frozen=True)
class UpstreamProxy:
    """The country's proxy the guard relays through (credentials stay here, never reach Chromium)."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    name: str = ""  # the pool member's name (its connection id), what its health is reported under

    @classmethod
    def from_server(cls, server: str, username: str | None = None, password: str | None = None,
                    name: str = "") -> UpstreamProxy:
        parts = urlsplit(server if "://" in server else f"http://{server}")
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https", "socks5"):
            raise ValueError(f"proxy scheme {scheme}:// is not supported by the browser guard (http, https, socks5)")
        default_port = {"http": 80, "https": 443, "socks5": 1080}[scheme]
        return cls(scheme, parts.hostname or "", parts.port or default_port, username or parts.username,
                   password or parts.password, name or f"{parts.hostname}:{parts.port or default_port}")

    async def open_tunnel(self, address: IPAddress, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection through this proxy to ``address``:``port`` (an address: the proxy resolves nothing)."""
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.scheme == "https" or None,
                                                       limit=MAX_HEAD_BYTES)
        try:
            if self.scheme == "socks5":
                await self._socks5(reader, writer, address, port)
            else:
                await self._http_connect(reader, writer, address, port)
        except BaseException:  # cancelled or refused mid-handshake: close our side before it propagates
            writer.close()
            raise
        return reader, writer

    async def _http_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: IPAddress,
                            port: int) -> None:
        target = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if self.username:
            token = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
            head += f"Proxy-Authorization: Basic {token}\r\n"
        writer.write((head + "\r\n").encode("latin-1"))
        await writer.drain()
        answer = await reader.readuntil(b"\r\n\r\n")
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or parts[1] != "200":
            status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
            raise UpstreamError(f"the country proxy refused CONNECT {target}: {status_line}", status)

    async def _socks5(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: IPAddress,
                      port: int) -> None:
        methods = b"\x00\x02" if self.username else b"\x00"
        writer.write(b"\x05" + bytes([len(methods)]) + methods)
        await writer.drain()
        version, method = await reader.readexactly(2)
        if version != 5 or method not in methods:
            raise UpstreamError("the country's SOCKS5 proxy accepts none of our authentication methods")
        if method == 2:
            user, password = (self.username or "").encode(), (self.password or "").encode()
            writer.write(b"\x01" + bytes([len(user)]) + user + bytes([len(password)]) + password)
            await writer.drain()
            if (await reader.readexactly(2))[1] != 0:
                raise UpstreamError("the country's SOCKS5 proxy refused our credentials")
        kind = b"\x01" if address.version == 4 else b"\x04"
        writer.write(b"\x05\x01\x00" + kind + address.packed + struct.pack(">H", port))
        await writer.drain()
        reply = await reader.readexactly(4)
        if reply[1] != 0:
            raise UpstreamError(f"the country's SOCKS5 proxy could not connect to {address}:{port} (code {reply[1]})")
        bound = {1: 4, 4: 16}.get(reply[3])
        if bound is None:  # a domain name as the bound address: its length first
            bound = (await reader.readexactly(1))[0]
        await reader.readexactly(bound + 2)


class UpstreamPool(Protocol):
    """The proxies one connection may leave through, in the order to try them, and where outcomes go."""

    async def candidates(self, host: str = "") -> list[UpstreamProxy]: ...

    async def report(self, upstream: UpstreamProxy, ok: bool) -> None: ...

    async def ban(self, name: str, host: str) -> int:
        """``host`` blocked a session through the member ``name``: the members it still welcomes."""
        ...

    async def carried(self, upstream: UpstreamProxy, amount: int) -> None:
        """A connection through ``upstream`` ended having relayed ``amount`` bytes both ways."""
        ...


@dataclass(frozen=True)
class SingleUpstream:
    """A pool of one proxy with no shared health (a caller that gives one ``UpstreamProxy``)."""

    upstream: UpstreamProxy

    async def candidates(self, host: str = "") -> list[UpstreamProxy]:
        return [self.upstream]

    async def report(self, upstream: UpstreamProxy, ok: bool) -> None:
        return None

    async def ban(self, name: str, host: str) -> int:
        return 0  # one proxy: nothing to rotate to

    async def carried(self, upstream: UpstreamProxy, amount: int) -> None:
        return None


@dataclass(frozen=True)
class Refusal:
    host: str
    port: int
    reason: str


class GuardProxy:
    """``proxy = GuardProxy(guard, upstream); await proxy.start()``; Chromium is launched with ``proxy.server``."""

    def __init__(self, guard: AddressGuard, upstream: UpstreamProxy | UpstreamPool | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
        self.guard = guard
        self.pool: UpstreamPool | None = SingleUpstream(upstream) if isinstance(upstream, UpstreamProxy) else upstream
        self.connect_timeout = connect_timeout
        self.proxy_failures = 0  # connections a proxy of the pool failed (each then tried through the next)
        self.proxy_errors = 0  # connections every proxy of the pool failed (answered with PROXY_ERROR_HEADER)
        self.bytes_relayed = 0  # both ways, every connection: what went through the country proxy
        self.refusals: list[Refusal] = []  # most recent last (bounded); :meth:`refusals_since` reads them
        self.refused = 0  # refusals ever (refusals_since counts from here)
        self._server: asyncio.Server | None = None
        self._port = 0
        self._pinned: dict[str, tuple[asyncio.Server, int]] = {}  # pool member -> its listener and port
        # an open tunnel -> the proxy it goes through (weak: a tunnel that never got spliced leaves no entry)
        self._carriers: weakref.WeakKeyDictionary[asyncio.StreamWriter, UpstreamProxy] = weakref.WeakKeyDictionary()
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0, limit=MAX_HEAD_BYTES)
        self._port = self._server.sockets[0].getsockname()[1]

    async def pinned(self, name: str) -> str:
        """The address of a listener whose connections try the pool's member ``name`` first (a session's exit):
        the same checks and failover as :attr:`server`, one listener per member, opened on first use."""
        if name not in self._pinned:
            server = await asyncio.start_server(functools.partial(self._client, preferred=name), "127.0.0.1", 0,
                                                limit=MAX_HEAD_BYTES)
            self._pinned[name] = (server, server.sockets[0].getsockname()[1])
        return f"http://127.0.0.1:{self._pinned[name][1]}"

    async def close(self) -> None:
        servers = [server for server in (self._server,) if server is not None]
        servers += [server for server, _ in self._pinned.values()]
        self._server = None
        self._pinned.clear()
        for server in servers:
            server.close()
        for writer in list(self._connections):
            writer.close()
        for server in servers:
            with contextlib.suppress(Exception):  # closing at shutdown: a slow or broken close changes nothing
                await asyncio.wait_for(server.wait_closed(), 5)

    def refusals_since(self, mark: int) -> list[Refusal]:
        """The refusals after the ``refused`` count was ``mark`` (as many as are still remembered)."""
        count = self.refused - mark
        return self.refusals[-count:] if count > 0 else []

    # -- one client connection ---------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      preferred: str | None = None) -> None:
        self._connections.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            await self._request(head, reader, writer, preferred)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError):
            pass
        except Exception:  # never let one connection's fault reach the loop's exception handler
            log.exception("browser guard: a connection failed")
        finally:
            self._connections.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):  # the peer may already be gone; the connection is closed either way
                await writer.wait_closed()

    async def _request(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       preferred: str | None = None) -> None:
        request_line, _, header_block = head.decode("latin-1").partition("\r\n")
        method, target, version = [*request_line.split(" "), "", "", ""][:3]
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            if not port_text.isdigit() or not host:
                await self._answer(writer, 400, "bad CONNECT target")
                return
            upstream = await self._checked_connection(host.strip("[]"), int(port_text), writer, True, preferred)
            if upstream is None:
                return
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            await self._splice(reader, writer, *upstream)
            return
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            await self._answer(writer, 400, f"not an absolute http:// request: {target[:200]}")
            return
        port = parts.port or 80
        upstream = await self._checked_connection(parts.hostname, port, writer, False, preferred)
        if upstream is None:
            return
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [line for line in header_block.split("\r\n") if line and line.split(":", 1)[0].strip().lower()
                not in ("proxy-connection", "connection", "keep-alive", "proxy-authorization")]
        origin_head = f"{method} {path} {version}\r\n" + "".join(f"{line}\r\n" for line in kept)
        sent = (origin_head + "Connection: close\r\n\r\n").encode("latin-1")
        upstream[1].write(sent)
        self.bytes_relayed += len(sent)
        await self._splice(reader, writer, *upstream, relayed=len(sent))

    async def _checked_connection(self, host: str, port: int, writer: asyncio.StreamWriter, tunnel: bool,
                                  preferred: str | None = None
                                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to a checked address of ``host``, or None after answering the refusal or failure."""
        own_ports = {self._port, *(own for _, own in self._pinned.values())}
        try:
            addresses = await self.guard.checked_addresses(host, port)
            if any(address.is_loopback and port in own_ports for address in addresses):
                raise AddressRefused(f"address refused: {host}:{port} is the browser guard itself")
        except AddressRefused as refused:
            self._remember(host, port, str(refused))
            await self._answer(writer, 403, str(refused), refused=True)
            return None
        last_error: BaseException | None = None
        for address in addresses:
            try:
                return await self._open(address, port, host.lower().rstrip("."), preferred)
            except ProxyPoolExhausted as error:
                self.proxy_errors += 1
                kind = "tunnel" if tunnel else "request"
                await self._answer(writer, 502, f"{kind} to {host}:{port}: {error}", proxy_error=True)
                return None
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as error:
                last_error = error
        kind = "tunnel" if tunnel else "request"
        await self._answer(writer, 502, f"{kind} to {host}:{port} failed: {type(last_error).__name__}: {last_error}")
        return None

    async def _open(self, address: IPAddress, port: int, host: str = "", preferred: str | None = None
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.pool is not None:
            return await self._open_through_pool(self.pool, address, port, host, preferred)
        family = socket.AF_INET6 if isinstance(address, ipaddress.IPv6Address) else socket.AF_INET
        return await asyncio.wait_for(asyncio.open_connection(str(address), port, family=family, limit=MAX_HEAD_BYTES),
                                      self.connect_timeout)

    async def _open_through_pool(self, pool: UpstreamPool, address: IPAddress, port: int, host: str = "",
                                 preferred: str | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A tunnel through the first proxy of the pool that opens it (the ``preferred`` one first: a session's
        exit); a proxy's own failure tries the next."""
        failures: list[str] = []
        candidates = await pool.candidates(host)
        if preferred is not None:  # stable: the rest keep the pool's order
            candidates.sort(key=lambda upstream: upstream.name != preferred)
        for upstream in candidates:
            try:
                connection = await asyncio.wait_for(upstream.open_tunnel(address, port), self.connect_timeout)
            except UpstreamError as error:
                if error.site_unreachable:
                    await pool.report(upstream, True)  # the proxy is alive: the site is what failed
                    raise
                failures.append(f"{upstream.name}: {type(error).__name__}: {error}")
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as error:
                failures.append(f"{upstream.name}: {type(error).__name__}: {error}")
            else:
                await pool.report(upstream, True)
                self._carriers[connection[1]] = upstream  # its bytes are the proxy's when it ends (_splice)
                return connection
            self.proxy_failures += 1
            await pool.report(upstream, False)
            log.info("browser guard: proxy %s failed, trying the next of the pool: %s", upstream.name, failures[-1])
        raise ProxyPoolExhausted("no proxy of the pool could open it: " + ("; ".join(failures) or "the pool is empty"))

    def _remember(self, host: str, port: int, reason: str) -> None:
        self.refused += 1
        self.refusals.append(Refusal(host, port, reason))
        del self.refusals[:-RECENT_REFUSALS]
        log.info("browser guard refused %s:%s: %s", host, port, reason)

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, reason: str, refused: bool = False,
                      proxy_error: bool = False) -> None:
        phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
        body = reason.encode("utf-8", "replace")
        safe = reason.encode("ascii", "replace").decode().replace("\r", " ").replace("\n", " ")
        extra = f"{REFUSED_HEADER}: {safe}\r\n" if refused else ""
        extra += f"{PROXY_ERROR_HEADER}: {safe}\r\n" if proxy_error else ""
        writer.write(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n{extra}"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1") + body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      upstream_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter,
                      relayed: int = 0) -> None:
        """Relay both ways until either side ends; then both are closed and the bytes (``relayed``: already sent)
        are the proxy's that carried them."""
        self._connections.add(upstream_writer)
        counted = [relayed]
        directions = [asyncio.ensure_future(self._pipe(reader, upstream_writer, counted)),
                      asyncio.ensure_future(self._pipe(upstream_reader, writer, counted))]
        try:
            await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for direction in directions:
                direction.cancel()
            await asyncio.gather(*directions, return_exceptions=True)
            self._connections.discard(upstream_writer)
            upstream_writer.close()
            carrier = self._carriers.pop(upstream_writer, None)
            if carrier is not None and self.pool is not None:
                with contextlib.suppress(Exception):  # a figure that cannot be written never fails a connection
                    await self.pool.carried(carrier, counted[0])

    async def _pipe(self, source: asyncio.StreamReader, target: asyncio.StreamWriter, relayed: list[int]) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await source.read(65536):
                self.bytes_relayed += len(chunk)
                relayed[0] += len(chunk)
                target.write(chunk)
                await target.drain()
