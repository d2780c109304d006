"""One page load in Chromium through Playwright: the launch flags, and a navigation read when it is ready.

The one slot browser (:mod:`harvester.scraping.browser.slot_browser`) serves the page slots, the in-process fetcher and
`harvester try`; :func:`load_page` is one attempt of it: navigate (the body capped as it streams), run the
source's actions, wait until the page is ready (:mod:`harvester.scraping.browser.readiness`), read the DOM. What makes
a load a failed one (re-rendered by the failure rules) is decided here; what to do about it, there.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harvester.config import SourceConfig
from harvester.scraping.browser.guard_proxy import PROXY_ERROR_HEADER, REFUSED_HEADER, GuardProxy
from harvester.scraping.browser.page_guard import BodyCap, ContextGuard, RequestCharger
from harvester.scraping.browser.readiness import NotReady, Readiness, run_actions
from harvester.scraping.extraction import BlockDetector, recognise_block
from harvester.scraping.fetching import DEFAULT_CLASSIFIER, Exchange, FetchResult, ResponseClassifier
from harvester.settings import HarvesterSettings

if TYPE_CHECKING:
    from playwright.async_api import Page, Response

MAX_ARCHIVED_DATA_RESPONSES = 50  # a page's JSON responses kept for the archive: a polling page stops here

# Playwright adds --no-sandbox unless settings.chromium_sandbox asks for Chromium's own sandbox.
# Nothing but the pages: no background traffic of Chromium's own (updates, sync, translation, safe-browsing
# pings, domain reliability reports) goes through a country's proxy or leaves the machine from a test.
CHROMIUM_ARGS = ["--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-default-apps", "--disable-domain-reliability", "--no-pings",
                 "--disable-client-side-phishing-detection",
                 "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,"
                 "CertificateTransparencyComponentUpdater"]
# The guard proxy is Chromium's only way out: Chromium resolves no name itself (its proxy, 127.0.0.1, needs no
# lookup) and WebRTC sends no UDP around the proxy. Appended after CHROMIUM_ARGS: the last of a switch wins.
GUARD_ARGS = ["--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
              "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
              "--webrtc-ip-handling-policy=disable_non_proxied_udp"]


def user_agent_and_headers(source: SourceConfig, settings: HarvesterSettings) -> tuple[str, dict[str, str]]:
    """The context's user agent (the source's ``User-Agent`` header, else Harvester's) and the source's other
    headers. Chromium sends its own Accept and Accept-Encoding, as a browser does."""
    headers = {name: value for name, value in source.headers.items() if name.lower() != "user-agent"}
    agent = next((value for name, value in source.headers.items() if name.lower() == "user-agent"), None)
    return agent or settings.user_agent, headers


def first_line(error: BaseException) -> str:
    """Playwright errors carry a call log after the first line; the first line is the reason."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


@dataclass
class PageLoad:
    """One attempt at a page: its result, whether it failed (re-rendered by the rules), and what it cost."""

    fetch: FetchResult
    load_failed: bool = False
    not_ready: str = ""  # the page loaded but was not ready in time: what it waited for
    blocked: Counter[str] = field(default_factory=Counter)  # by resource type, address_refused, websocket, popup
    transferred_bytes: int = 0  # through the guard proxy, both ways: what went through the country proxy
    site_requests: int = 0  # documents, XHR and fetch to the task's host, the navigation included
    sub_requests: int = 0  # of those, the ones after the navigation (each charged a rate token)
    actions: Counter[str] = field(default_factory=Counter)
    proxy_errors: int = 0  # connections a proxy of the pool failed during the load (each tried through the next)


@dataclass
class LoadTools:
    """What one page of a slot browser loads with: its context's guard, its body cap, the browser's proxy."""

    page: Page
    guard: ContextGuard
    cap: BodyCap
    proxy: GuardProxy


async def load_page(tools: LoadTools, url: str, source: SourceConfig, kind: str, settings: HarvesterSettings,
                    charger: RequestCharger | None = None,
                    classifier: ResponseClassifier = DEFAULT_CLASSIFIER) -> PageLoad:
    """Navigate to ``url``, run the actions, wait until ready, read the DOM (one attempt, never raises for what a
    site does). A page that did not load (timeout, refused connection, crashed tab) or was not ready in time is
    ``load_failed``; one that answered an HTTP error is an outcome, classified as the HTTP fetcher's are."""
    started = time.monotonic()
    page = tools.page
    await tools.guard.begin(url, page, charger)
    tools.cap.begin()
    data_responses: list[Response] = []
    collector = DataResponses(data_responses)
    if source.output.archive.enabled:  # the JSON its data came from, archived beside the page
        page.on("response", collector)
    try:
        return await _load(tools, url, source, kind, settings, classifier, started, data_responses)
    finally:
        if source.output.archive.enabled:
            page.remove_listener("response", collector)


async def _load(tools: LoadTools, url: str, source: SourceConfig, kind: str, settings: HarvesterSettings,
                classifier: ResponseClassifier, started: float, data_responses: list[Response]) -> PageLoad:
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    started_at = time.time()  # the queue latency ends here
    page, proxy = tools.page, tools.proxy
    refused_before, bytes_before, failures_before = proxy.refused, proxy.bytes_relayed, proxy.proxy_failures
    loaded = PageLoad(FetchResult(url, "ok", started_at=started_at))
    try:
        response = await page.goto(url, wait_until="commit", timeout=source.timeout * 1000)
        remaining = max(1.0, source.timeout - (time.monotonic() - started)) * 1000
        status = response.status if response is not None else 200
        text = None
        if status < 400 and not _refused_by_proxy(response):  # an error page is an answer: read, not awaited
            text = await _prepared(tools, Readiness(source, kind), loaded, remaining)
        else:
            await tools.cap.loaded(page, remaining)
        if text is None:
            text = await page.content()
    except PlaywrightTimeout:
        loaded.fetch = FetchResult(url, "timeout", reason=f"page did not load within {source.timeout:g}s",
                                   started_at=started_at)
        loaded.load_failed = True
        return _finish(loaded, tools, started, refused_before, bytes_before, failures_before)
    except PlaywrightError as error:
        refusal = tools.guard.navigation_refusal or _tunnel_refusal(error, proxy, refused_before,
                                                                    tools.guard.requested)
        if refusal is not None:  # our refusal, not a failed load: never retried
            loaded.fetch = FetchResult(url, "refused", reason=refusal, started_at=started_at)
        elif "ERR_INVALID_AUTH_CREDENTIALS" in str(error):  # a 401 challenge Chromium had no answer to
            verdict = classifier.classify(401, {}, None)
            loaded.fetch = FetchResult(url, verdict.outcome, status=401, started_at=started_at,
                                       reason=f"{verdict.reason} (the site asks for credentials: http_connection_id)")
        else:
            loaded.fetch = FetchResult(url, "connection_error", reason=first_line(error), started_at=started_at)
            loaded.load_failed = True
        return _finish(loaded, tools, started, refused_before, bytes_before, failures_before)
    _read(loaded, response, text, page.url, settings.body_size_cap_bytes, tools.cap, classifier)
    _unready_block(loaded, source, settings)
    if source.output.archive.enabled and loaded.fetch.outcome != "refused":
        loaded.fetch.exchange = await browser_exchange(response, settings.body_size_cap_bytes)
        kept = [await browser_exchange(data, settings.body_size_cap_bytes) for data in data_responses]
        loaded.fetch.data_exchanges = tuple(exchange for exchange in kept if exchange is not None)
    return _finish(loaded, tools, started, refused_before, bytes_before, failures_before)


class DataResponses:
    """Keeps a page's JSON responses to its XHR and fetch calls (what a browser page's data comes from), for
    the archive (a listener of the page's ``response`` event while one load lasts)."""

    def __init__(self, responses: list[Response]) -> None:
        self.responses = responses

    def __call__(self, response: Response) -> None:
        if len(self.responses) >= MAX_ARCHIVED_DATA_RESPONSES:
            return
        if response.request.resource_type not in ("xhr", "fetch"):
            return
        content_type = response.headers.get("content-type", "").lower()
        if "json" in content_type.split(";", 1)[0]:
            self.responses.append(response)


async def browser_exchange(response: Response | None, cap: int) -> Exchange | None:
    """A response Chromium received, as the archive keeps it: the request's headers as sent and the
    response's as received, the body as the site sent it (decoded). None when Chromium no longer holds the
    body (a redirect, a body cut at the cap, a page navigated away) or it is over the cap: not archived."""
    from playwright.async_api import Error as PlaywrightError

    if response is None:
        return None
    try:
        body = await response.body()
        sent = await response.request.all_headers()
        received = await response.headers_array()
    except PlaywrightError:
        return None
    if len(body) > cap:
        return None
    return Exchange(response.request.method, response.url, tuple((name, value) for name, value in sent.items()
                                                                 if not name.startswith(":")),
                    response.status, tuple((header["name"], header["value"]) for header in received), body)


def _unready_block(loaded: PageLoad, source: SourceConfig, settings: HarvesterSettings) -> None:
    """A page that never became ready because it is a challenge (its item's selectors never appear) is a block,
    not a failed load: re-loading it seven times would only ask the wall seven more times."""
    if not loaded.not_ready:
        return
    detector = BlockDetector.for_source(source, settings.block_markers)
    if (block := recognise_block(detector, "ok", loaded.fetch.status, loaded.fetch.text)) is not None:
        loaded.fetch.outcome, loaded.fetch.reason = block
        loaded.load_failed, loaded.not_ready = False, ""


async def _prepared(tools: LoadTools, readiness: Readiness, loaded: PageLoad, remaining_ms: float) -> str | None:
    """``load``, the actions, then readiness: the page's HTML when the page itself said it was ready (one call
    that waits and reads), else None (read it now). A page stops being waited for once its body is cut; one
    not ready in time is a failed load (with the DOM as it was). ``load`` first, as a browser user expects: a
    skeleton whose placeholders match the selectors before the page's scripts ran is not ready."""
    page, cap = tools.page, tools.cap
    await cap.loaded(page, remaining_ms)
    if cap.cut.is_set():
        return None
    loaded.actions = await run_actions(page, readiness.source.browser.actions, readiness)
    try:
        await cap.unless_cut(readiness.wait(page))  # network_idle or a delay (a selector is waited for in the page)
        if readiness.reads_in_page:
            return await _read_when_ready(readiness, tools, remaining_ms)
    except NotReady as not_ready:
        loaded.not_ready = str(not_ready)
        loaded.load_failed = True
    return None


async def _read_when_ready(readiness: Readiness, tools: LoadTools, remaining_ms: float) -> str | None:
    """The in-page wait; a page that navigates meanwhile (a script's redirect) is waited for again, once, in
    its new document."""
    from playwright.async_api import Error as PlaywrightError

    try:
        return await tools.cap.unless_cut(readiness.read_when_ready(tools.page))
    except PlaywrightError as error:  # a script navigated the page meanwhile
        if "context was destroyed" not in str(error) and "navigat" not in str(error):
            raise
    await tools.cap.loaded(tools.page, remaining_ms)
    return await tools.cap.unless_cut(readiness.read_when_ready(tools.page))


def _refused_by_proxy(response: Response | None) -> bool:
    """The guard answered, not the site: it refused the address or no proxy of the pool could reach it."""
    return response is not None and (REFUSED_HEADER.lower() in response.headers
                                     or PROXY_ERROR_HEADER.lower() in response.headers)


def _tunnel_refusal(error: BaseException, proxy: GuardProxy, refused_before: int, asked: set[tuple[str, int]]
                    ) -> str | None:
    """A navigation whose tunnel the guard refused (HTTPS, or a redirect to a refused address) fails with
    ``ERR_TUNNEL_CONNECTION_FAILED``; the guard's refusal during this load is why."""
    if "ERR_TUNNEL_CONNECTION_FAILED" not in str(error):
        return None
    refusals = [refusal for refusal in proxy.refusals_since(refused_before)
                if (refusal.host.lower(), refusal.port) in asked]
    return refusals[-1].reason if refusals else None


def _read(loaded: PageLoad, response: Response | None, text: str, final_url: str, cap: int, body_cap: BodyCap,
          classifier: ResponseClassifier) -> None:
    """The DOM as the page's text, cut at the cap; the status classified; a proxy refusal as the outcome."""
    status = response.status if response is not None else 200
    headers = response.headers if response is not None else {}
    body = text.encode()
    fetch = loaded.fetch
    fetch.final_url, fetch.status, fetch.text = final_url, status, text
    fetch.content_type, fetch.size = "text/html", len(body)
    if REFUSED_HEADER.lower() in headers:
        fetch.outcome, fetch.reason, fetch.text = "refused", headers[REFUSED_HEADER.lower()], ""
        loaded.load_failed, loaded.not_ready = False, ""
        return
    if PROXY_ERROR_HEADER.lower() in headers:  # no proxy of the pool could carry it: a failed load, not the site's
        fetch.outcome, fetch.reason, fetch.text = "proxy_error", headers[PROXY_ERROR_HEADER.lower()], ""
        loaded.load_failed, loaded.not_ready = True, ""
        return
    if len(body) > cap or body_cap.cut.is_set():
        fetch.text, fetch.truncated = body[:cap].decode(errors="ignore"), True
        seen = max(body_cap.received, len(body))
        fetch.reason = f"body cut at {cap} decoded bytes (the load was stopped after {seen})"
        loaded.load_failed, loaded.not_ready = False, ""
    if loaded.not_ready:
        fetch.reason = loaded.not_ready
    classified = classifier.classify(status, headers, None)
    if classified.outcome != "ok":
        fetch.outcome, fetch.reason, fetch.retry_after = classified.outcome, classified.reason, classified.retry_after


def _finish(loaded: PageLoad, tools: LoadTools, started: float, refused_before: int, bytes_before: int,
            failures_before: int) -> PageLoad:
    """The load's counts: what the context blocked, what the guard proxy refused and relayed, the proxies' failures."""
    loaded.blocked = Counter(tools.guard.blocked)
    asked = tools.guard.requested
    refused = sum(1 for refusal in tools.proxy.refusals_since(refused_before)
                  if (refusal.host.lower(), refusal.port) in asked)
    if refused:
        loaded.blocked["address_refused"] += refused
    loaded.transferred_bytes = tools.proxy.bytes_relayed - bytes_before
    loaded.proxy_errors = tools.proxy.proxy_failures - failures_before
    loaded.site_requests, loaded.sub_requests = tools.guard.site_requests, tools.guard.sub_requests
    loaded.fetch.elapsed = time.monotonic() - started
    loaded.fetch.blocked_requests = sum(loaded.blocked.values())
    return loaded
