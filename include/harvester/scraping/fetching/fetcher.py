"""Async HTTP fetching: keep-alive connections, a total per-request deadline, a body-size cap and a redirect cap, and
one outcome per page. The HTTP library is a :mod:`~harvester.scraping.fetching.transports` transport: aiohttp
(HTTP/1.1) by default, httpx with HTTP/2 over TLS when ``HARVESTER_HTTP2`` is on.

Hostile sites (docs/workers.md, "Fetch-side defences"): redirects are followed here, hop by hop, each hop's address
checked (:mod:`harvester.scraping.fetching.addresses`) and the connected peer checked after it; bodies are decoded
with a cap on decoded bytes (:mod:`harvester.scraping.fetching.bodies`); text is decoded in the WHATWG order
(:mod:`harvester.scraping.fetching.charsets`: BOM, header, prolog or ``<meta>``, detection); robots.txt and the
per-host rate are asked before a request starts; a source's ``http_connection_id`` supplies its credentials. Every
refusal is a per-page outcome with its reason, never an exception.

One :class:`Fetcher` is kept per worker process and reused across batches, so connections to a site stay open between
Celery messages (like Scrapy's downloader, and unlike a client per task).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urljoin

from harvester.config import HttpRequest, SourceConfig
from harvester.connections import HttpCredentials
from harvester.errors import (
    HarvesterError,
    RobotsDisallowed,
    RobotsUnavailable,
    TaskNoLongerHeld,
    TooManyRedirects,
    TransportFailure,
)
from harvester.scraping.fetching.addresses import AddressGuard, AddressRefused, strip_userinfo
from harvester.scraping.fetching.bodies import ACCEPT_ENCODING, Body, BodyRefused, read_body
from harvester.scraping.fetching.charsets import decode_text
from harvester.scraping.fetching.cookies import SourceCookieJars, set_cookie_values
from harvester.scraping.fetching.outgoing import (
    KeptCredentials,
    OutgoingRequest,
    RequestRefused,
    credential_headers,
    outgoing_request,
)
from harvester.scraping.fetching.page_fetcher import (
    NO_SECRET_HEADERS,
    SKIPPED_REASON,
    Exchange,
    FetchedBatch,
    FetchPermit,
    FetchResult,
    HostLimits,
    HostRateTimeout,
)
from harvester.scraping.fetching.responses import (
    BLOCKED_STATUSES,
    DEFAULT_CLASSIFIER,
    HTML_TYPES,
    RETRYABLE_STATUSES,
    Outcome,
    ResponseClassifier,
    parse_retry_after,
)
from harvester.scraping.fetching.robots import ROBOTS_SIZE_CAP_BYTES, RobotsCache, RobotsRules
from harvester.scraping.fetching.sessions import NO_POOL_EXIT, RETIRING_STATUSES, ExitPool, Session, Sessions
from harvester.scraping.fetching.sites import Origin, credential_origins, origin_of_url
from harvester.scraping.fetching.transports import (
    HOST_UNREACHABLE,
    PROXY_ERROR_HEADER,
    REFUSED_HEADER,
    Transport,
    TransportResponse,
    transport_from_settings,
)
from harvester.settings import HarvesterSettings

log = logging.getLogger(__name__)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
FAILED_BODY_SHARE = 0.9  # of the source's timeout, from the request: a failed response's body read for the archive

__all__ = ["BLOCKED_STATUSES", "DEFAULT_HEADERS", "HTML_TYPES", "RETRYABLE_STATUSES", "FetchResult", "Fetcher",
           "HostLimits", "Outcome", "RequestGate", "credential_headers", "decode_text", "parse_retry_after",
           "request_headers"]

DEFAULT_HEADERS = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.9",
    "Accept-Encoding": ACCEPT_ENCODING,  # only what bodies.py decodes with a cap
}


JSON_ACCEPT = "application/json, application/ld+json;q=0.9, */*;q=0.5"


def request_headers(source: SourceConfig, settings: HarvesterSettings) -> dict[str, str]:
    """Harvester's User-Agent and plain Accept headers (JSON ones for a ``content: json`` source), the source's win."""
    accept = {"Accept": JSON_ACCEPT} if source.content == "json" else {}
    visitor = source.presented_visitor
    language = {"Accept-Language": visitor.accept_language} if visitor and visitor.accept_language else {}
    return {"User-Agent": settings.user_agent, **DEFAULT_HEADERS, **accept, **language, **source.headers}


class RequestGate(Protocol):
    """Per-host politeness at fetch time (:class:`harvester.workers.host_rate.HostRateGate`)."""

    max_wait_seconds: float

    async def acquire(self, source: str, url: str, limits: HostLimits) -> Any: ...

    async def release(self, token: Any) -> None: ...


async def _guard_answer(response: TransportResponse) -> None:
    """Raise for the guard proxy's own answers: an address it refused, or a pool with no proxy that carried it."""
    refused, proxy_error = response.headers.get(REFUSED_HEADER), response.headers.get(PROXY_ERROR_HEADER)
    if refused is None and proxy_error is None:
        return
    await response.aclose()
    if refused is not None:
        raise AddressRefused(refused)
    raise TransportFailure("proxy_error", proxy_error or "no proxy of the pool could carry it")


class Fetcher:
    """A pooled HTTP transport with Harvester's limits. Use as ``async with Fetcher(settings) as fetcher``.

    Meets the :class:`~harvester.scraping.fetching.page_fetcher.PageFetcher` contract: a batch's pages are
    fetched concurrently, each within ``source.timeout`` (plus, when the host is rate-limited, the
    wait for its turn, at most the gate's ``max_wait_seconds``).
    """

    def __init__(self, settings: HarvesterSettings, max_connections: int = 100,
                 classifier: ResponseClassifier = DEFAULT_CLASSIFIER, guard: AddressGuard | None = None,
                 robots: RobotsCache | None = None, gate: RequestGate | None = None,
                 transport: Transport | None = None, exits: ExitPool | None = None) -> None:
        self.settings = settings
        self.classifier = classifier
        self.guard = guard or AddressGuard.from_settings(settings)
        self.robots = robots if robots is not None else RobotsCache.from_settings(settings, None)
        self.gate = gate
        self.cookies = SourceCookieJars()  # one jar per source: nothing one source got reaches another
        self._credentials = KeptCredentials()
        self._origins: dict[str, tuple[HttpCredentials, frozenset[Origin]]] = {}
        # connections whose peer was checked (stream -> port), so a kept-alive one is not checked per request
        self._checked_peers: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        # redirects are followed hop by hop in _send, each hop's address checked
        self.transport = transport or transport_from_settings(settings, max_connections, self._check_connection)
        # a source with a country goes out in sessions, each bound to one exit of the country's proxy pool
        self.sessions = Sessions(exits, self.cookies.forget)
        self._max_connections = max_connections
        self._exit_transports: dict[str, Transport] = {}  # a session exit's local address -> its transport

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()
        for transport in self._exit_transports.values():
            await transport.aclose()
        self._exit_transports.clear()

    def transport_for(self, session: Session | None) -> Transport:
        """A request's way out: its session's exit (a source with a country whose pool has proxies: every request
        then goes through the pool, robots.txt and redirects included); else the direct transport."""
        if session is None or not session.exit.url:  # no session, or one on the direct tier: the worker's address
            return self.transport
        url = session.exit.url
        if url.startswith(NO_POOL_EXIT):
            raise TransportFailure("proxy_error", f"tier {session.tier} of {session.country} has no proxy: set the "
                                                  f"connection proxy_{session.country.lower()}_{session.tier}")
        if url not in self._exit_transports:
            self._exit_transports[url] = transport_from_settings(self.settings, self._max_connections, proxy=url)
        return self._exit_transports[url]


    @classmethod
    def from_settings(cls, settings: HarvesterSettings, robots: RobotsCache | None = None,
                      gate: RequestGate | None = None, guard: AddressGuard | None = None,
                      exits: ExitPool | None = None) -> Fetcher:
        return cls(settings, robots=robots, gate=gate, guard=guard, exits=exits)

    def fetch_seconds(self, source: SourceConfig, pages: int) -> float:
        """Pages are fetched concurrently and each ends by ``source.timeout`` after its turn came; robots.txt
        (once per host, within ``source.timeout``) and the host's rate may come first."""
        waiting = self.gate.max_wait_seconds if self.gate is not None else 0.0
        robots = source.timeout if source.robots == "obey" else 0.0
        return source.timeout + robots + waiting

    async def fetch_all(self, urls: Sequence[str], source: SourceConfig, permit: FetchPermit | None = None
                        ) -> FetchedBatch:
        async def one(index: int, url: str) -> FetchResult:
            return await self.fetch(url, source, None if permit is None else functools.partial(permit, index))

        batch = await FetchedBatch.gathered(one(index, url) for index, url in enumerate(urls))
        batch.outcomes.update(self.robots.take_outcomes())  # robots.txt rules bounded away, files unavailable
        return batch

    def credentials(self, source: SourceConfig) -> HttpCredentials | None:
        """The source's ``http_connection_id`` resolved by the connection factory (kept a minute)."""
        return self._credentials.of(source)

    async def fetch(self, url: str, source: SourceConfig, ready: Callable[[], Awaitable[bool]] | None = None,
                    conditions: Mapping[str, str] | None = None, request: HttpRequest | None = None) -> FetchResult:
        """Fetch one page; never raises for what a site can do wrong (that becomes the outcome): whatever a
        parser raises on a body or a header it was sent (a date out of range, a cookie, robots.txt, a charset)
        is this page's ``parse_error``, so one page never fails the pages fetched beside it.

        ``ready`` is asked last, right before the request starts (after robots.txt and the host's turn,
        outside the timeout: waiting is not fetching): the batch's per_minute token is taken as close to
        the site's view as the worker can; False means the task is no longer ours (outcome ``skipped``).
        Every other request the page costs the site asks it too, right before it starts: a robots.txt
        fetch and each redirect hop take a token of their own, so per_minute counts what the site sees.
        ``conditions`` (If-None-Match / If-Modified-Since) make it a conditional request: a 304 is ``not_modified``.
        ``request``: a method and a body (an API's POST) instead of a plain GET; robots.txt, the address rules,
        the host's rate and the redirect cap hold for it as for a GET (:mod:`~harvester.scraping.fetching.outgoing`)."""
        started = time.monotonic()
        started_at = time.time()
        url = strip_userinfo(url)
        token = None
        try:
            limits = await self._before_request(url, source, ready)
            if self.gate is not None and limits is not None:
                token = await self.gate.acquire(source.name, url, limits)
            if ready is not None and not await ready():
                result = FetchResult(url, "skipped", reason=SKIPPED_REASON)
            else:
                async with asyncio.timeout(source.timeout):
                    result = await self._fetch(url, source, ready, conditions, request)
        except Exception as error:  # what a site can cause is this page's outcome (failure_result); ours re-raise
            result = self.failure_result(url, source, error)
        finally:
            if token is not None and self.gate is not None:
                await self.gate.release(token)
        result.elapsed = time.monotonic() - started
        result.started_at = started_at
        return result

    def failure_result(self, url: str, source: SourceConfig, failure: Exception) -> FetchResult:
        """The page's outcome for what went wrong fetching or reading it; the worker's own stores failing (Redis,
        MongoDB: a :class:`HarvesterError` not listed here) re-raise, so its batch goes back, not the page."""
        try:
            raise failure
        except TaskNoLongerHeld:
            return FetchResult(url, "skipped", reason=SKIPPED_REASON)
        except RobotsDisallowed as error:
            return FetchResult(url, "robots_disallowed", reason=str(error))
        except RobotsUnavailable as error:
            return FetchResult(url, "robots_unavailable", reason=str(error))
        except AddressRefused as error:
            return FetchResult(url, "refused", reason=str(error))
        except BodyRefused as error:
            return FetchResult(url, "decode_error", reason=str(error))
        except zlib.error as error:
            return FetchResult(url, "decode_error", reason=f"undecodable body: {type(error).__name__}: {error}")
        except MemoryError:
            return FetchResult(url, "decode_error", reason="out of memory reading the body")
        except TimeoutError:
            return FetchResult(url, "timeout", reason=f"no complete response within {source.timeout:g}s")
        except TooManyRedirects:
            return FetchResult(url, "too_many_redirects",
                               reason=f"more than {self.settings.max_redirects} redirects (a loop?)")
        except TransportFailure as error:
            return FetchResult(url, error.outcome, reason=str(error))
        except OSError as error:
            return FetchResult(url, "connection_error", reason=f"{type(error).__name__}: {error}")
        except HostRateTimeout as error:
            return FetchResult(url, "host_rate_wait", reason=str(error))
        except HarvesterError:
            raise
        except Exception as error:  # a parser broke on what the site sent (a date, a charset, a cookie, robots.txt)
            log.warning("reading the response of %s failed: %s: %s", url, type(error).__name__, error)
            return FetchResult(url, "parse_error",
                               reason=f"unreadable response: {type(error).__name__}: {error}"[:300])

    async def _before_request(self, url: str, source: SourceConfig,
                              ready: Callable[[], Awaitable[bool]] | None = None) -> HostLimits | None:
        """robots.txt (when obeyed) and the host's limits; raises :class:`RobotsDisallowed`."""
        self.guard.split(url)  # a refused scheme never reaches robots.txt or the rate gate
        interval = 0.0
        if source.robots == "obey":
            # a refused address stays refused (never retried): its robots.txt, which cannot be fetched
            # either, would otherwise read as unavailable (retried)
            await self.guard.check(url, remember=True)
            rules = await self.robots_rules(url, source, ready)
            if rules.unavailable and rules.status is None:  # the host did not answer: say so, as its pages would
                outcome = HOST_UNREACHABLE if rules.failure.startswith(HOST_UNREACHABLE) else "connection_error"
                raise TransportFailure(outcome, f"robots.txt of {rules.origin} could not be fetched "
                                       f"({rules.failure or 'no answer'}): nothing is fetched from it (RFC 9309)")
            if rules.unavailable:
                raise RobotsUnavailable(f"robots.txt of {rules.origin} answered {rules.status or 'nothing'} and no "
                                        "good copy is kept: nothing is fetched from it for now (RFC 9309)")
            user_agent = request_headers(source, self.settings)["User-Agent"]
            if not rules.allowed(url, user_agent):
                raise RobotsDisallowed(f"robots.txt of {rules.origin} disallows this URL for "
                                       f"{user_agent.split('/', 1)[0]}")
            interval = rules.min_interval_seconds(user_agent)
        if self.gate is None:
            return None
        limit = source.rate_limit
        return HostLimits(limit.per_host_per_minute or 0, interval, limit.per_host_max_active or 0)

    async def robots_rules(self, url: str, source: SourceConfig,
                           ready: Callable[[], Awaitable[bool]] | None = None) -> RobotsRules:
        async def fetch_robots(robots_url: str) -> tuple[int | None, str]:
            if ready is not None and not await ready():  # a request at the site: it takes a token too
                raise TaskNoLongerHeld(f"no longer held before fetching {robots_url}")
            try:
                async with asyncio.timeout(source.timeout):
                    status, _, body, content_type = await self._get(robots_url, source, ROBOTS_SIZE_CAP_BYTES, ready)
            except TransportFailure as error:
                if error.outcome == "proxy_error":  # our way out failed, not the host: nothing to learn of its file
                    raise
                log.info("robots.txt %s unreachable: %s", robots_url, error)
                kind = HOST_UNREACHABLE if error.outcome == HOST_UNREACHABLE else type(error).__name__
                return None, f"{kind}: {error}"  # the page's outcome then says so; no status: the text says what failed
            except (AddressRefused, BodyRefused, TimeoutError, TooManyRedirects, OSError, MemoryError,
                    zlib.error) as error:
                log.info("robots.txt %s unreachable: %s", robots_url, error)
                return None, f"{type(error).__name__}: {error}"  # no status: the text says what failed
            return status, decode_text(body, content_type) if 200 <= status < 300 else ""

        return await self.robots.rules(url, fetch_robots)

    async def _send(self, url: str, source: SourceConfig, ready: Callable[[], Awaitable[bool]] | None = None,
                    conditions: Mapping[str, str] | None = None, request: HttpRequest | None = None,
                    sent: dict[str, str] | None = None, session: Session | None = None) -> TransportResponse:
        """Send ``url``'s request (a GET, or ``request``'s method and body) and follow redirects by hand: every
        hop's URL and the peer it connected to are checked, credentials go only to the origins they are bound
        to (:func:`hop_headers`), cookies come from and go to the source's own jar (its session's, when it goes out
        through a proxy pool: every hop through the session's exit), and userinfo is dropped.
        ``sent``: filled with the last hop's request headers, for the archive."""
        session = session or await self.sessions.of(source, url)
        jar = session.key if session is not None else source.name
        transport = self.transport_for(session)
        headers = {**request_headers(source, self.settings), **(conditions or {})}
        credentials = self.credentials(source)
        outgoing = OutgoingRequest() if request is None else outgoing_request(
            request, credentials, self._bound(source, credentials, url), self.settings.max_request_body_bytes)
        current = url
        for hop in range(self.settings.max_redirects + 1):
            await self.guard.check(current, remember=True)  # the peer is checked below
            if hop > 0 and ready is not None and not await ready():  # each hop is a request start too
                raise TaskNoLongerHeld(f"no longer held before the redirect to {current}")
            sent_headers = {**self.hop_headers(source, headers, credentials, current, jar), **outgoing.headers}
            if sent is not None:  # the archive keeps the request the page came from: the last hop's
                sent.clear()
                sent.update(sent_headers)
            response = await self._first_byte(transport.send(outgoing.method, current, sent_headers, outgoing.body),
                                              current)
            if transport is not self.transport:  # through a guard proxy: an answer of its own is no site's
                await _guard_answer(response)
            self.cookies.store(jar, current, set_cookie_values(response.headers))
            location = response.headers.get("location")
            if response.status not in REDIRECT_STATUSES or not location:
                return response
            await response.aclose()
            current = strip_userinfo(urljoin(current, location.strip()))
            outgoing = outgoing.after_redirect(response.status)
            if outgoing.carries_secrets and not self._bound(source, credentials, current):
                raise RequestRefused(f"a redirect to {current} would carry the connection's secrets in the body "
                                     "to an origin they are not bound to: not sent")
        raise TooManyRedirects(f"more than {self.settings.max_redirects} redirects")

    def hop_headers(self, source: SourceConfig, headers: Mapping[str, str], credentials: HttpCredentials | None,
                    url: str, jar: str | None = None) -> dict[str, str]:
        """The headers of one request: the source's, its jar's cookies for ``url``, and the connection's
        credentials only when ``url``'s origin (scheme, host, port) is one they are bound to
        (:func:`harvester.scraping.fetching.sites.credential_origins`); the connection's cookies win over the jar's."""
        hop = dict(headers)
        bound = credentials is not None and origin_of_url(url) in self._credential_origins(source, credentials)
        if bound and credentials is not None:
            hop.update({key: value for key, value in credential_headers(credentials).items() if key != "Cookie"})
        cookie = self.cookies.header(jar or source.name, url, credentials.cookies if bound and credentials else None)
        if cookie:
            hop["Cookie"] = f"{hop['Cookie']}; {cookie}" if hop.get("Cookie") else cookie
        return hop

    def exchange(self, source: SourceConfig, response: TransportResponse, sent: Mapping[str, str],
                 body: bytes, method: str = "GET") -> Exchange:
        """A page's request and response as they went (:class:`Exchange`), with its credentials' header names."""
        credentials = self.credentials(source)
        names = credential_headers(credentials) if credentials is not None else ()
        items = getattr(response.headers, "multi_items", response.headers.items)  # httpx keeps repeats apart so
        return Exchange(method, response.url, tuple(sent.items()), response.status,  # (aiohttp's items() does),
                        tuple(items()), body, response.http_version or "HTTP/1.1",  # as str pairs both
                        frozenset(map(str.lower, names)) if names else NO_SECRET_HEADERS)

    def _bound(self, source: SourceConfig, credentials: HttpCredentials | None, url: str) -> bool:
        """Whether ``credentials`` may go to ``url``'s origin."""
        return credentials is not None and origin_of_url(url) in self._credential_origins(source, credentials)

    def _credential_origins(self, source: SourceConfig, credentials: HttpCredentials) -> frozenset[Origin]:
        """:func:`credential_origins`, kept while the same credentials serve the source (seeds may be many)."""
        kept = self._origins.get(source.name)
        if kept is None or kept[0] is not credentials:
            kept = self._origins[source.name] = (credentials, credential_origins(source, credentials))
        return kept[1]

    def _check_connection(self, connection: object, peer: object, url: str) -> None:
        """Refuse the address the connection reached: once a connection (its peer never changes), on its first
        request. A peer that cannot be told is refused (:meth:`AddressGuard.check_peer` fails closed)."""
        _, _, port = self.guard.split(url)
        if self._checked_peers.get(connection) == port:
            return
        self.guard.check_peer(peer, port)
        self._checked_peers[connection] = port

    async def _get(self, url: str, source: SourceConfig, cap: int,
                   ready: Callable[[], Awaitable[bool]] | None = None) -> tuple[int, TransportResponse, bytes, str]:
        """Status, response, decoded body (at most ``cap`` bytes) and content type of a guarded GET."""
        response = await self._send(url, source, ready)
        try:
            body = await self.read_capped(response, cap)
        finally:
            await response.aclose()
        return response.status, response, body.content, response.headers.get("content-type", "")

    async def _failed_body(self, response: TransportResponse, status: int, until: float) -> Body | None:
        """A failed response's body, for the archive only (the latest archived response of a URL is what the site
        last said: a re-extraction reads a 410 as gone). The outcome is the status's already: a body that cannot be
        read, or not by ``until`` (loop time, before the fetch's own timeout), is archived empty."""
        if status == 304:
            return None
        try:
            async with asyncio.timeout_at(until):  # a body that trickles on must not make the 503 a timeout
                return await self.read_capped(response, self.settings.body_size_cap_bytes)
        except Exception as error:  # the connection dropped, the body undecodable or late: the status stands
            log.debug("the body of %s (HTTP %s) was not read for the archive: %s", response.url, status, error)
            return None

    async def read_capped(self, response: TransportResponse, cap: int) -> Body:
        """The body decoded up to ``cap`` bytes, reading at most ``raw_body_cap_bytes`` off the wire (through
        :class:`~harvester.scraping.fetching.bodies.WireCap`): cut there, the page keeps what decoded (``truncated``);
        nothing decoded is refused (``decode_error``)."""
        return await read_body(response.raw_chunks(), response.headers.get("content-encoding"), cap,
                               wire_cap=self.settings.raw_body_cap_bytes)

    async def _first_byte(self, sending: Awaitable[TransportResponse], url: str) -> TransportResponse:
        """The response headers within ``first_byte_timeout_seconds`` of sending (the connect timeout included),
        else ``host_unreachable``: a host that accepts connections and never answers costs seconds, not the
        source's whole timeout, and its breaker counts it (harvester.workers.host_breaker)."""
        limit = self.settings.first_byte_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                return await sending
        except TimeoutError:
            raise TransportFailure(HOST_UNREACHABLE, f"no response from {url} within "
                                                     f"{limit:g}s (first-byte timeout)") from None

    async def _fetch(self, url: str, source: SourceConfig, ready: Callable[[], Awaitable[bool]] | None = None,
                     conditions: Mapping[str, str] | None = None, request: HttpRequest | None = None) -> FetchResult:
        cap = self.settings.body_size_cap_bytes
        sent: dict[str, str] | None = {} if source.output.archive.enabled else None
        archiving = sent is not None  # then a failed response's body is read for it, until:
        failed_body_until = asyncio.get_running_loop().time() + FAILED_BODY_SHARE * source.timeout if archiving else 0
        method = request.method if request is not None else "GET"
        session = await self.sessions.of(source, url)
        response = await self._send(url, source, ready, conditions, request, sent, session)
        try:
            status = response.status
            content_type = response.headers.get("content-type", "")
            result = FetchResult(url, "ok", final_url=response.url, status=status,
                                 content_type=content_type, http_version=response.http_version,
                                 etag=response.headers.get("etag", ""),
                                 last_modified=response.headers.get("last-modified", ""))
            result.transferred = sum(len(name) + len(value) + 4 for name, value in response.headers.items())
            if session is not None:
                result.session, result.tier = session.key, session.tier
                if status in RETIRING_STATUSES:  # the site holds something against this exit or these cookies
                    await self.sessions.blocked(session.key, f"HTTP {status}")
            classified = self.classifier.classify(status, response.headers, content_type, source.content)
            if classified.outcome != "ok":
                result.outcome, result.reason = classified.outcome, classified.reason
                result.retry_after = classified.retry_after
                if sent is not None:  # archived too: a 304 as a revisit, a 410 or a block as what the site said
                    failed = await self._failed_body(response, status, failed_body_until)
                    result.transferred += failed.wire_bytes if failed is not None else 0
                    result.exchange = self.exchange(source, response, sent,
                                                    failed.content if failed is not None else b"", method)
                return result
            body = await self.read_capped(response, cap)
        finally:
            await response.aclose()
        if sent is not None:
            result.exchange = self.exchange(source, response, sent, body.content, method)
        result.size, result.transferred = len(body.content), result.transferred + body.wire_bytes
        result.truncated = body.truncated
        result.text = decode_text(body.content, content_type)
        if body.raw_cut:
            result.reason = f"body cut at {self.settings.raw_body_cap_bytes} raw bytes"
        elif result.truncated:
            result.reason = f"body cut at {cap} decoded bytes"
        return result
