"""Loading pages in Chromium through Playwright: launch flags, resource blocking and one page load.

The harvest's long-lived browsers are hosted by the page slots (``harvester.pageslots.host``);
:func:`render_page` is the one-shot render of `harvester try`. Both use the helpers here, so a page
loads, blocks and reports the same way in either.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from harvester.config import SourceConfig
from harvester.scraping.addresses import AddressGuard, AddressRefused
from harvester.scraping.fetcher import FetchResult, request_headers
from harvester.scraping.responses import DEFAULT_CLASSIFIER, ResponseClassifier
from harvester.settings import HarvesterSettings

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, Playwright, Request, Route

# Playwright adds --no-sandbox unless settings.chromium_sandbox asks for Chromium's own sandbox.
# Nothing but the pages: no background traffic of Chromium's own (updates, sync, translation, safe-browsing
# pings, domain reliability reports) goes through a country's proxy or leaves the machine from a test.
CHROMIUM_ARGS = ["--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-default-apps", "--disable-domain-reliability", "--no-pings",
                 "--disable-client-side-phishing-detection",
                 "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,"
                 "CertificateTransparencyComponentUpdater"]


async def launch_chromium(playwright: Playwright, settings: HarvesterSettings) -> Browser:
    """Headless Chromium from ``settings.chromium_executable`` (the OS package, or the image's own)."""
    return await playwright.chromium.launch(
        executable_path=str(settings.chromium_executable), headless=True, args=CHROMIUM_ARGS,
        chromium_sandbox=settings.chromium_sandbox)


def user_agent_and_headers(source: SourceConfig, settings: HarvesterSettings) -> tuple[str, dict[str, str]]:
    """The browser context's user agent, and the extra headers every request of the source carries."""
    headers = request_headers(source, settings)
    return headers.pop("User-Agent"), headers


def first_line(error: BaseException) -> str:
    """Playwright errors carry a call log after the first line; the first line is the reason."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class ResourceBlocker:
    """Aborts requests of the blocked resource types and measures what the page did fetch.

    Attached once to a page and re-armed per load with :meth:`begin`. What a blocked request would
    have cost is unknowable (it never reaches the server), so we count blocked requests per type and
    the bytes actually transferred (headers and bodies of finished requests), never an estimate.
    """

    def __init__(self, guard: AddressGuard | None = None) -> None:
        self.blocked_types: frozenset[str] = frozenset()
        self.blocked: Counter[str] = Counter()
        self._finished: list[Request] = []
        self.guard = guard  # every request and every redirect hop of a navigation is checked (addresses.py)
        self.navigation_refusal: str | None = None

    async def attach(self, page: Page) -> None:
        await page.route("**/*", self._intercept)
        page.on("requestfinished", self._request_finished)

    def begin(self, blocked_types: list[str]) -> None:
        self.blocked_types = frozenset(blocked_types)
        self.blocked = Counter()
        self._finished = []
        self.navigation_refusal = None

    def _request_finished(self, request: Request) -> None:
        self._finished.append(request)

    async def _intercept(self, route: Route) -> None:
        request = route.request
        resource_type = request.resource_type
        if resource_type in self.blocked_types:
            self.blocked[resource_type] += 1
            await route.abort("blockedbyclient")
            return
        if self.guard is None:
            await route.continue_()
            return
        navigation = request.is_navigation_request() and request.frame.parent_frame is None
        try:
            await self.guard.check(request.url)
            if not navigation:
                await route.continue_()
                return
            # Chromium follows redirects without asking the route again: fetch the hop ourselves, check
            # where it points, and hand the answer to the page (a redirect then comes back here).
            response = await route.fetch(max_redirects=0)
            location = response.headers.get("location")
            if 300 <= response.status < 400 and location:
                await self.guard.check(urljoin(request.url, location))
            await route.fulfill(response=response)
        except AddressRefused as refused:
            self.blocked["address_refused"] += 1
            if navigation:
                self.navigation_refusal = str(refused)
            await route.abort("addressunreachable")
        except Exception as error:  # route.fetch failed (refused connection, reset): the page sees the same error
            await route.abort(abort_code(error))

    async def transferred_bytes(self) -> int:
        """Response headers plus bodies of every request this load finished (as Chromium counted them)."""
        sizes = await asyncio.gather(*(request.sizes() for request in self._finished), return_exceptions=True)
        return sum(size["responseHeadersSize"] + size["responseBodySize"]
                   for size in sizes if isinstance(size, dict))


FETCH_ERRORS_TO_ABORT_CODES = {"ECONNREFUSED": "connectionrefused", "ENOTFOUND": "namenotresolved",
                               "EAI_AGAIN": "namenotresolved", "ETIMEDOUT": "timedout",
                               "ECONNRESET": "connectionreset"}


def abort_code(error: BaseException) -> str:
    """The network error a page sees for a failed ``route.fetch`` (as Chromium would have reported it)."""
    text = str(error)
    return next((code for name, code in FETCH_ERRORS_TO_ABORT_CODES.items() if name in text), "failed")


async def response_body_size(response: Any) -> int:
    """The decoded size of the main document as Chromium received it (0 when unknown)."""
    if response is None:
        return 0
    try:
        sizes = await response.request.sizes()
    except Exception:  # the request may be gone (a crashed page): the DOM size still applies
        return 0
    return int(sizes.get("responseBodySize", 0))


@dataclass
class PageLoad:
    """One navigation: its result, whether the page failed to load at all, and what blocking did."""

    fetch: FetchResult
    load_failed: bool = False
    blocked: Counter[str] = field(default_factory=Counter)
    transferred_bytes: int = 0


async def load_page(page: Page, blocker: ResourceBlocker, url: str, source: SourceConfig,
                    settings: HarvesterSettings, classifier: ResponseClassifier = DEFAULT_CLASSIFIER) -> PageLoad:
    """Navigate ``page`` to ``url`` and wait for ``load``; the DOM after that is the page's text.

    A page that did not load (timeout, refused connection, crashed tab) is ``load_failed``: the
    caller may re-open the page and try again. A page that loaded with an HTTP error is a normal
    outcome, classified by the same :class:`ResponseClassifier` as the HTTP fetcher's (403/451 blocked,
    other 4xx/5xx http_error); the DOM is HTML whatever the server sent, so no content-type check.
    """
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    started, started_at = time.monotonic(), time.time()  # started_at: the queue latency ends here
    blocker.begin(source.blocked_resource_types)
    _, headers = user_agent_and_headers(source, settings)
    try:
        await page.set_extra_http_headers(headers)
        response = await page.goto(url, wait_until="load", timeout=source.timeout * 1000)
        text = await page.content()
        final_url = page.url
    except PlaywrightTimeout:
        fetch = FetchResult(url, "timeout", reason=f"page did not load within {source.timeout:g}s",
                            elapsed=time.monotonic() - started, started_at=started_at)
        return PageLoad(fetch, load_failed=True, blocked=blocker.blocked)
    except PlaywrightError as error:
        if blocker.navigation_refusal is not None:  # our refusal, not a failed load: never retried
            fetch = FetchResult(url, "refused", reason=blocker.navigation_refusal,
                                elapsed=time.monotonic() - started, started_at=started_at)
            return PageLoad(fetch, blocked=blocker.blocked)
        fetch = FetchResult(url, "connection_error", reason=first_line(error),
                            elapsed=time.monotonic() - started, started_at=started_at)
        return PageLoad(fetch, load_failed=True, blocked=blocker.blocked)
    elapsed = time.monotonic() - started
    status = response.status if response is not None else 200
    headers_in: dict[str, Any] = response.headers if response is not None else {}
    body = text.encode()
    cap = settings.body_size_cap_bytes
    fetch = FetchResult(url, "ok", final_url=final_url, status=status, text=text, content_type="text/html",
                        size=len(body), elapsed=elapsed, started_at=started_at)
    if blocker.navigation_refusal is not None:
        fetch.outcome, fetch.reason, fetch.text = "refused", blocker.navigation_refusal, ""
        return PageLoad(fetch, blocked=blocker.blocked)
    received = await response_body_size(response)
    if len(body) > cap or received > cap:
        fetch.text, fetch.truncated = body[:cap].decode(errors="ignore"), True
        fetch.reason = f"body cut at {cap} decoded bytes (the server sent {max(received, len(body))})"
    classified = classifier.classify(status, headers_in, None)
    if classified.outcome != "ok":
        fetch.outcome, fetch.reason, fetch.retry_after = classified.outcome, classified.reason, classified.retry_after
    fetch.blocked_requests = sum(blocker.blocked.values())
    return PageLoad(fetch, blocked=blocker.blocked, transferred_bytes=await blocker.transferred_bytes())


async def render_page(url: str, source: SourceConfig, settings: HarvesterSettings) -> FetchResult:
    """Load ``url`` once in a browser of its own (`harvester try`): no retries, closed afterwards."""
    from playwright.async_api import async_playwright

    started, started_at = time.monotonic(), time.time()
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright, settings)
        try:
            user_agent, _ = user_agent_and_headers(source, settings)
            context = await browser.new_context(user_agent=user_agent)
            page = await context.new_page()
            blocker = ResourceBlocker(AddressGuard.from_settings(settings))
            await blocker.attach(page)
            loaded = await load_page(page, blocker, url, source, settings)
        finally:
            await browser.close()
    loaded.fetch.blocked_requests = sum(loaded.blocked.values())
    loaded.fetch.elapsed, loaded.fetch.started_at = time.monotonic() - started, started_at
    return loaded.fetch
