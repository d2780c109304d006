"""The HTTP libraries under :class:`~harvester.scraping.fetching.fetcher.Fetcher`, behind one small contract.

The fetcher owns every rule (redirects hop by hop, address checks, capped decoding, outcomes); a
transport only sends one request (a GET, or a POST with the body the fetcher built) without following
redirects or decoding the body, and says which connection answered. Two are kept because each is best at something:

- :class:`AiohttpTransport`, the default: HTTP/1.1 with aiohttp's C parser, about a fifth of httpx's
  CPU per request on the demo site (0.16 against 0.73-0.78 ms, docs/benchmarks.md), which is most of a
  worker's fetching cost;
- :class:`HttpxTransport` when ``HARVESTER_HTTP2`` is on: httpx negotiates HTTP/2 over TLS (ALPN), for
  sites that serve many pages over one connection, at httpx's CPU cost.

Library exceptions never leave a transport: they become :class:`~harvester.errors.TransportFailure`
with the fetch outcome they mean (timeouts stay ``TimeoutError``, which the fetcher's deadline raises too), except
that a connection refused, a name that does not resolve and a connect timeout are ``host_unreachable``
(``settings.connect_timeout_seconds`` apart from the fetcher's deadline; DNS answers kept ``dns_cache_seconds``).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import aiohttp
import httpcore
import httpx
import yarl

from harvester.errors import TransportFailure
from harvester.settings import HarvesterSettings

__all__ = ["HOST_UNREACHABLE", "PROXY_ERROR_HEADER", "REFUSED_HEADER", "AiohttpTransport", "ConnectionCheck",
           "HttpxTransport", "Transport", "TransportResponse", "transport_from_settings"]

# What a local guard proxy (harvester.scraping.browser.guard_proxy) adds to an answer of its own: it refused the
# address (the request never left), or no proxy of the country's pool could carry it (the proxies' failure).
REFUSED_HEADER = "X-Harvester-Refused"
PROXY_ERROR_HEADER = "X-Harvester-Proxy-Error"

# Called with (the connection, its peer address, the URL) before a response on it is used: raise to refuse.
# The connection object is the same for every request of one kept-alive connection, so checks can be cached.
ConnectionCheck = Callable[[object, object, str], None]


# The outcome of a host that cannot be reached: refused, DNS failing, no connection within the connect timeout
# (or, said by the fetcher, no response headers within the first-byte timeout). Counted by the host's breaker.
HOST_UNREACHABLE = "host_unreachable"

# aiohttp refuses longer header lines by default (8,190 bytes); sites send long Set-Cookie headers
MAX_HEADER_BYTES = 64 * 1024


def _no_check(connection: object, peer: object, url: str) -> None:
    return None


class TransportResponse(Protocol):
    """One response whose body has not been read yet."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    url: str
    http_version: str

    def raw_chunks(self) -> AsyncIterator[bytes]:
        """The body as it came off the wire (still content-encoded)."""
        ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    async def get(self, url: str, headers: Mapping[str, str]) -> TransportResponse:
        """Send one GET (no redirect followed, nothing decoded); raises :class:`TransportFailure`."""
        ...

    async def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None = None
                   ) -> TransportResponse:
        """Send one request with ``method`` and ``body`` (no redirect followed, nothing decoded)."""
        ...

    async def aclose(self) -> None: ...


def transport_from_settings(settings: HarvesterSettings, max_connections: int,
                            check: ConnectionCheck = _no_check, proxy: str | None = None) -> Transport:
    """``proxy``: every request through this forward proxy (a country's local guard proxy, which checks the
    address and pins it, so ``check`` is then left to it)."""
    if settings.http2:
        return HttpxTransport(max_connections, check, settings.connect_timeout_seconds, proxy)
    return AiohttpTransport(max_connections, check, settings.connect_timeout_seconds, settings.dns_cache_seconds,
                            proxy)


def proxy_failure(error: aiohttp.ClientHttpProxyError | aiohttp.ClientProxyConnectionError) -> TransportFailure:
    """A CONNECT the local guard proxy answered with a refusal or a proxy error, as the fetch outcome it means."""
    headers = getattr(error, "headers", None) or {}
    if PROXY_ERROR_HEADER in headers:
        return TransportFailure("proxy_error", headers[PROXY_ERROR_HEADER])
    if REFUSED_HEADER in headers or getattr(error, "status", None) == 403:
        return TransportFailure("refused", headers.get(REFUSED_HEADER, f"the guard proxy refused it: {error}"))
    return TransportFailure("connection_error", f"{type(error).__name__}: {error}")


# -- aiohttp ---------------------------------------------------------------------------------------
class _CheckingConnector(aiohttp.TCPConnector):
    """Checks every connection it hands out (new or kept alive) before a request goes over it: aiohttp may
    let go of a connection as soon as a small body has arrived, so a response is too late to ask."""

    def __init__(self, check: ConnectionCheck, **options: Any) -> None:
        super().__init__(**options)
        self._check = check

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        transport = connection.transport
        try:
            self._check(connection.protocol, transport.get_extra_info("peername") if transport else None,
                        str(req.url))
        except BaseException:  # refused or cancelled alike: the connection is closed, the error re-raised
            connection.close()  # never back to the pool
            raise
        return connection


class _AiohttpResponse:
    __slots__ = ("_response", "headers", "http_version", "status", "url")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers
        self.url = str(response.url)
        self.http_version = f"HTTP/{response.version.major}.{response.version.minor}" if response.version else ""

    async def raw_chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ClientPayloadError as error:
            raise TransportFailure("connection_error", f"body cut short: {error}") from None
        except aiohttp.ClientError as error:
            raise TransportFailure("connection_error", f"{type(error).__name__}: {error}") from None

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport:
    """aiohttp with its content decoding off (bodies.py decodes with a cap), no redirects followed and no
    cookies kept (the fetcher keeps a jar per source, harvester.scraping.fetching.cookies); no proxy from the
    environment (aiohttp's ``trust_env`` is off); ``proxy``: every request through that forward proxy."""

    def __init__(self, max_connections: int = 100, check: ConnectionCheck = _no_check,
                 connect_timeout: float | None = None, dns_cache_seconds: float = 60.0,
                 proxy: str | None = None) -> None:
        self._max_connections = max_connections
        self._check = check
        self._connect_timeout = connect_timeout  # apart from the fetcher's deadline for the whole response
        self._dns_cache_seconds = dns_cache_seconds  # each new connection's peer is checked whatever the cache says
        self._proxy = proxy
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use: aiohttp binds it to the running event loop."""
        if self._session is None:
            connector = _CheckingConnector(self._check, limit=self._max_connections, limit_per_host=0,
                                           keepalive_timeout=60, ssl=ssl.create_default_context(),
                                           ttl_dns_cache=max(1, round(self._dns_cache_seconds)))
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
                skip_auto_headers=("User-Agent",),
                max_line_size=MAX_HEADER_BYTES, max_field_size=MAX_HEADER_BYTES, raise_for_status=False)
        return self._session

    async def get(self, url: str, headers: Mapping[str, str]) -> TransportResponse:
        return await self.send("GET", url, headers)

    async def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None = None
                   ) -> TransportResponse:
        # an ASCII URL is sent as it is (canonical URLs are already escaped: re-quoting would change them)
        target = yarl.URL(url, encoded=True) if url.isascii() else yarl.URL(url)
        try:
            response = await self._open().request(method, target, headers=dict(headers), data=body,
                                                  allow_redirects=False, proxy=self._proxy)
        except (aiohttp.ClientHttpProxyError, aiohttp.ClientProxyConnectionError) as error:
            raise proxy_failure(error) from None
        except aiohttp.InvalidURL as error:
            raise TransportFailure("parse_error", f"invalid URL: {error}") from None
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            if isinstance(error, aiohttp.ClientSSLError):  # it answered: a TLS problem is not a host gone
                raise TransportFailure("connection_error", f"{type(error).__name__}: {error}") from None
            raise TransportFailure(HOST_UNREACHABLE, f"{type(error).__name__}: {error}") from None
        except aiohttp.ClientError as error:
            raise TransportFailure("connection_error", f"{type(error).__name__}: {error}") from None
        except ValueError as error:  # yarl or the request line refused the URL
            raise TransportFailure("parse_error", f"invalid URL: {error}") from None
        return _AiohttpResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# -- httpx -----------------------------------------------------------------------------------------
class _HttpxResponse:
    __slots__ = ("_response", "headers", "http_version", "status", "url")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = response.headers
        self.url = str(response.url)
        self.http_version = response.http_version

    async def raw_chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.TimeoutException as error:
            raise TimeoutError(f"{type(error).__name__}: {error}") from None
        except httpx.TransportError as error:
            raise TransportFailure("connection_error", f"{type(error).__name__}: {error}") from None

    async def aclose(self) -> None:
        await self._response.aclose()


class _CheckingNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the connection check between connecting and the first byte written:
    a TCP connection whose peer is refused (a name rebound to an internal address) is closed before the TLS
    handshake or the request goes over it, and a peer that cannot be told is refused (fail closed)."""

    def __init__(self, check: ConnectionCheck) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._check = check

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout=timeout, local_address=local_address,
                                               socket_options=socket_options)
        try:
            netloc = f"[{host}]" if ":" in host else host
            self._check(stream, stream.get_extra_info("server_addr"), f"http://{netloc}:{port}/")
        except BaseException:  # refused or cancelled alike: the connection is closed, the error re-raised
            await stream.aclose()
            raise
        return stream

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        raise TransportFailure("connection_error", "unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _refusing_cookie_jar() -> Any:
    """A jar that keeps nothing (the fetcher keeps a jar per source); httpx would keep cookies per client."""
    from http.cookiejar import CookieJar, DefaultCookiePolicy

    return CookieJar(DefaultCookiePolicy(allowed_domains=[]))


class HttpxTransport:
    """httpx with HTTP/2 where the site offers it over TLS; no redirects followed, raw bodies, no cookies kept,
    no proxy or certificate settings from the environment (``trust_env`` off, as aiohttp), and every new
    connection checked before anything is written on it (:class:`_CheckingNetworkBackend`).

    httpx 0.28 has no option for httpcore's network backend, so the transport's pool is rebuilt with it
    (``tests/scraping/test_transports.py`` pins that the transport still holds its pool there)."""

    def __init__(self, max_connections: int = 100, check: ConnectionCheck = _no_check,
                 connect_timeout: float | None = None, proxy: str | None = None) -> None:
        self._check = check
        transport = httpx.AsyncHTTPTransport(http2=True, trust_env=False)
        pool_options: dict[str, Any] = {  # the CAs aiohttp trusts
            "ssl_context": ssl.create_default_context(), "max_connections": max_connections,
            "max_keepalive_connections": max_connections, "keepalive_expiry": 60, "http1": True, "http2": True}
        if proxy is None:
            transport._pool = httpcore.AsyncConnectionPool(network_backend=_CheckingNetworkBackend(check),
                                                           **pool_options)
        else:  # the guard proxy checks and pins each address; its own loopback address is not the site's
            transport._pool = httpcore.AsyncHTTPProxy(proxy_url=proxy, **pool_options)
        self.client = httpx.AsyncClient(
            transport=transport, follow_redirects=False, trust_env=False, cookies=_refusing_cookie_jar(),
            timeout=httpx.Timeout(30.0, connect=connect_timeout),
        )

    async def get(self, url: str, headers: Mapping[str, str]) -> TransportResponse:
        return await self.send("GET", url, headers)

    async def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None = None
                   ) -> TransportResponse:
        try:
            request = self.client.build_request(method, url, headers=dict(headers), content=body)
            response = await self.client.send(request, stream=True)
        except (httpx.ConnectTimeout, httpx.ConnectError) as error:
            raise TransportFailure(HOST_UNREACHABLE, f"{type(error).__name__}: {error}") from None
        except httpx.TimeoutException as error:
            raise TimeoutError(f"{type(error).__name__}: {error}") from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as error:
            raise TransportFailure("parse_error", f"invalid URL: {error}") from None
        except (httpx.TransportError, OSError) as error:
            raise TransportFailure("connection_error", f"{type(error).__name__}: {error}") from None
        return _HttpxResponse(response)

    async def aclose(self) -> None:
        await self.client.aclose()
