"""What a browser context may do (DESIGN.md section 12): the route every request of the CONTEXT passes (its
pages and their popups alike), its WebSockets, its popups, and the cap on a navigation's body.

The :class:`ContextGuard` is attached once to each context (one per source visit, :mod:`slot_browser`):

- requests of a blocked resource type are aborted and counted; names refused as written (``localhost``,
  ``*.localhost``, a trailing dot) and literal addresses the rules refuse are aborted before Chromium sends
  anything (every other address is checked, and pinned, by the guard proxy every request goes through);
- requests to the task's own origin (documents, XHR, fetch) are the site's requests: each one, the page's own
  navigation included, waits for its rate tokens right before it leaves (``per_minute`` and the per-host rate,
  as the site sees them) and is counted;
- the source's HTTP connection headers and cookies go to the origins its credentials are bound to
  (:func:`harvester.scraping.fetching.sites.credential_origins`: the connection's own, else the seeds'), as the HTTP
  fetcher sends them, never to the origin of whatever URL a task names, and on every hop: a request that carries
  the headers is fetched one hop at a time (:meth:`ContextGuard._send_one_hop`), so a redirect to another origin
  arrives there without them;
- WebSockets are refused unless the source allows them (then they connect through the guard proxy, checked
  like any connection); popups are closed as they open (their requests were routed here first);

:class:`BodyCap` watches the main document as Chromium's network stack decodes it (CDP ``Network.dataReceived``)
and stops the load once the decoded bytes pass the cap, so no body is buffered or decompressed whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from harvester.config import SourceConfig
from harvester.scraping.fetching import AddressGuard, Origin, name_refusal, origin_of_url

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, CDPSession, Page, Route, WebSocketRoute

log = logging.getLogger(__name__)
T = TypeVar("T")
SITE_RESOURCE_TYPES = frozenset({"document", "xhr", "fetch"})  # what the site serves as pages and data
_ANY_URL = re.compile(r".*")


class RequestCharger(Protocol):
    """Takes a rate token for one request the page is about to send to its site (the slot's pipeline; None in
    tools): the source's ``per_minute`` token and its host's turn, waiting on the event loop for them."""

    async def charge(self, url: str) -> None: ...


class ContextGuard:
    """The route, WebSocket and popup rules of one context, re-armed per page load by :meth:`begin`."""

    def __init__(self, source: SourceConfig, address_guard: AddressGuard,
                 credential_headers: Mapping[str, str] | None = None,
                 credential_origins: frozenset[Origin] = frozenset()) -> None:
        self.source = source
        self.address_guard = address_guard
        self.credential_headers = dict(credential_headers or {})
        self.credential_origins = credential_origins  # where the headers and cookies may go (none: nowhere)
        self.connection_cookies: dict[str, str] = {}  # the HTTP connection's, set on this context per origin
        self._cookie_origins: set[Origin] = set()
        self.blocked_types = frozenset(source.blocked_resource_types)
        self.blocked: Counter[str] = Counter()
        self.site_requests = 0  # documents, XHR and fetch to the task's own host, the navigation included
        self.sub_requests = 0  # those after the navigation: each charged a rate token
        self.navigation_refusal: str | None = None
        self.requested: set[tuple[str, int]] = set()  # (host, port) the context asked for during this load
        self.main_page: Page | None = None
        self._origin: Origin | None = None
        self._charger: RequestCharger | None = None
        self._navigated = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watched: set[Any] = set()  # pages whose WebSockets are watched (for the guard's refusals)

    async def attach(self, context: BrowserContext) -> None:
        context.on("page", self._popup)
        context.on("request", self._requested)
        routes = [context.route("**/*", self._intercept)]
        if self.source.browser.websockets == "refuse" or "websocket" in self.blocked_types:
            routes.append(context.route_web_socket(_ANY_URL, self._refuse_socket))
        await asyncio.gather(*routes)

    def _requested(self, request: Any) -> None:
        """Every request of the context, redirect hops included: the guard proxy's refusals of these are the
        page's (Chromium's own traffic, sign-in and update checks, is not)."""
        parts = urlsplit(request.url)
        if parts.hostname:
            default_port = 443 if parts.scheme in ("https", "wss") else 80
            self.requested.add((parts.hostname.lower(), parts.port or default_port))

    async def begin(self, url: str, page: Page, charger: RequestCharger | None) -> None:
        """A new load of ``url`` in ``page``: counts start again; requests to its origin are the site's, and the
        source's HTTP connection cookies are set for that origin on this context (once) when the credentials
        are bound to it."""
        self.blocked = Counter()
        self.site_requests = self.sub_requests = 0
        self.navigation_refusal = None
        self.requested = set()
        self.main_page, self._origin, self._charger, self._navigated = page, origin_of_url(url), charger, False
        if page not in self._watched:
            self._watched.add(page)
            page.on("websocket", self._requested)
        origin = self._origin
        if self.connection_cookies and origin in self.credential_origins and origin not in self._cookie_origins:
            self._cookie_origins.add(origin)
            scheme, host, port = origin
            netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 address in brackets
            await page.context.add_cookies([{"name": name, "value": value, "url": f"{scheme}://{netloc}"}
                                            for name, value in self.connection_cookies.items()])

    # -- requests ----------------------------------------------------------------------------------
    async def _intercept(self, route: Route) -> None:
        try:
            await self._decide(route)
        except Exception as error:  # never leave a request hanging: what could not be decided is not sent
            log.warning("request %s refused: its route failed: %s", route.request.url, error)
            self.blocked["route_failed"] += 1
            with contextlib.suppress(Exception):  # the page or context went away meanwhile
                await route.abort("failed")

    async def _decide(self, route: Route) -> None:
        request = route.request
        kind = request.resource_type
        if kind in self.blocked_types:
            self.blocked[kind] += 1
            await route.abort("blockedbyclient")
            return
        try:
            main_navigation = request.is_navigation_request() and self.main_page is not None \
                and request.frame == self.main_page.main_frame
        except Exception:  # a request without a frame (a worker's): not a navigation
            main_navigation = False
        refusal = self._refusal(request.url)
        if refusal is not None:
            self.blocked["address_refused"] += 1
            if main_navigation:
                self.navigation_refusal = refusal
            await route.abort("addressunreachable")
            return
        origin = origin_of_url(request.url)
        own = origin is not None and origin == self._origin
        if own and kind in SITE_RESOURCE_TYPES:
            self.site_requests += 1
            if main_navigation and not self._navigated:
                self._navigated = True  # the task's own request
            else:
                self.sub_requests += 1
            if self._charger is not None:  # its tokens right before it leaves: as the site sees it
                await self._charger.charge(request.url)
        if self.credential_headers and origin in self.credential_origins:
            await self._send_one_hop(route, {**request.headers, **self.credential_headers})
            return
        await route.continue_()

    async def _send_one_hop(self, route: Route, headers: dict[str, str]) -> None:
        """Sends a request that carries the connection's headers without following its redirects: headers given
        to ``route.continue_`` ride along every redirect Chromium follows, and the hops never come back to the
        route. Here the guard fetches the one hop (through the same guard proxy and cookie jar as Chromium) and
        hands the answer to Chromium; a redirect is then followed by Chromium as a new request, which the route
        decides again, so the login goes on to the next hop only when that hop's origin is bound too."""
        response = await route.fetch(headers=headers, max_redirects=0, timeout=self.source.timeout * 1000)
        await route.fulfill(response=response)

    def _refusal(self, url: str) -> str | None:
        """What is refused without a lookup: the scheme, a refused name, a refused literal address."""
        if url.startswith(("data:", "blob:", "about:")):
            return None
        literal = self.address_guard.literal_refusal(url)
        if literal is not None:
            return literal
        host = urlsplit(url).hostname or ""
        return name_refusal(host)

    # -- WebSockets and popups ---------------------------------------------------------------------
    async def _refuse_socket(self, socket: WebSocketRoute) -> None:
        self.blocked["websocket"] += 1
        with contextlib.suppress(Exception):  # refused either way: the page may have closed the socket first
            await socket.close(code=1008, reason="WebSockets are refused for this source")

    def _popup(self, page: Page) -> None:
        if page is self.main_page or self.main_page is None:
            return
        self.blocked["popup"] += 1
        task = asyncio.ensure_future(page.close())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class BodyCap:
    """Stops a page's load once its main document's decoded bytes pass ``cap`` (one CDP session per page)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.received = 0
        self.cut = asyncio.Event()
        self._session: CDPSession | None = None
        self._frame = ""
        self._document: str | None = None
        self._stopping: asyncio.Future[Any] | None = None

    async def attach(self, context: BrowserContext, page: Page) -> None:
        session = await context.new_cdp_session(page)
        # DevTools keeps no copies of bodies for this session: it only counts them
        _, tree = await asyncio.gather(
            session.send("Network.enable", {"maxTotalBufferSize": 1024, "maxResourceBufferSize": 1024}),
            session.send("Page.getFrameTree"))
        self._frame = tree["frameTree"]["frame"]["id"]
        session.on("Network.requestWillBeSent", self._request)
        session.on("Network.dataReceived", self._data)
        self._session = session

    def begin(self) -> None:
        self.received, self._document = 0, None
        self.cut = asyncio.Event()

    def _request(self, event: dict[str, Any]) -> None:
        main_document = event.get("type") == "Document" and event.get("frameId") == self._frame
        if main_document and self._document != event.get("requestId"):
            self._document, self.received = event.get("requestId"), 0

    def _data(self, event: dict[str, Any]) -> None:
        if event.get("requestId") != self._document or self.cut.is_set():
            return
        self.received += int(event.get("dataLength", 0))
        if self.received > self.cap and self._session is not None:
            self.cut.set()
            self._stopping = asyncio.ensure_future(self._session.send("Page.stopLoading"))
            self._stopping.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def unless_cut(self, waiting: Awaitable[T]) -> T | None:
        """``waiting``'s result, or None as soon as the body is cut (a cut page is read as it is; what failed
        because of the cut is not an error)."""
        task = asyncio.ensure_future(waiting)
        cutting = asyncio.ensure_future(self.cut.wait())
        try:
            await asyncio.wait([task, cutting], return_when=asyncio.FIRST_COMPLETED)
        finally:
            cutting.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):  # the cut task was cancelled: its ending is not ours to raise
                await task
            return None
        if task.exception() is not None and self.cut.is_set():
            return None
        return task.result()

    async def loaded(self, page: Page, timeout_ms: float) -> None:
        """Wait for ``load``, or for the cut (a cut document never fires it); raises Playwright's timeout."""
        await self.unless_cut(page.wait_for_load_state("load", timeout=timeout_ms))
