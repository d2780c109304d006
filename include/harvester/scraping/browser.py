"""Render one page in Chromium through Playwright (for `harvester try` on ``render: browser`` sources).

Long-lived browsers for the harvest itself are the page slots' job (``harvester.pageslots``); this is
a one-shot render with the same launch flags and the same resource blocking.
"""

from __future__ import annotations

import time

from harvester.config.model import SourceConfig
from harvester.scraping.fetcher import FetchResult, request_headers
from harvester.settings import HarvesterSettings

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


async def render_page(url: str, source: SourceConfig, settings: HarvesterSettings) -> FetchResult:
    """Load ``url`` headless, blocking ``source.blocked_resource_types``; the DOM after load is the text."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import Route, async_playwright
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    started = time.monotonic()
    blocked_types = set(source.blocked_resource_types)
    counts = {"blocked": 0}
    headers = request_headers(source, settings)
    user_agent = headers.pop("User-Agent")

    async def intercept(route: Route) -> None:
        if route.request.resource_type in blocked_types:
            counts["blocked"] += 1
            await route.abort("blockedbyclient")
        else:
            await route.continue_()

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(settings.chromium_executable), headless=True, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(user_agent=user_agent, extra_http_headers=headers)
            page = await context.new_page()
            await page.route("**/*", intercept)
            try:
                response = await page.goto(url, wait_until="load", timeout=source.timeout * 1000)
            except PlaywrightTimeout:
                return FetchResult(url, "timeout", reason=f"page did not load within {source.timeout:g}s",
                                   elapsed=time.monotonic() - started)
            except PlaywrightError as error:
                return FetchResult(url, "connection_error", reason=str(error).splitlines()[0],
                                   elapsed=time.monotonic() - started)
            status = response.status if response is not None else 200
            text = await page.content()
            result = FetchResult(url, "ok", final_url=page.url, status=status, text=text,
                                 content_type="text/html", size=len(text.encode()))
            if status in (403, 451):
                result.outcome, result.reason = "blocked", f"HTTP {status}: the site refused us"
            elif status >= 400:
                result.outcome, result.reason = "http_error", f"HTTP {status}"
            result.blocked_requests = counts["blocked"]
            result.elapsed = time.monotonic() - started
            return result
        finally:
            await browser.close()
