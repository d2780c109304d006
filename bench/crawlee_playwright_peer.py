"""The browser crawlee peer of bench/pageslots.py: crawlee-python's PlaywrightCrawler on the same pages.

Run by bench/pageslots.py with the Python of var/bench-venv (crawlee and its own Playwright live
there, not in .venv). Same Chromium (``--executable-path``), same launch flags, the same forward proxy
given at launch, the same resource blocking (a route that aborts the blocked resource types, installed
in a pre-navigation hook because crawlee opens a page per request), one page at a time
(concurrency 1). Everything else is crawlee's default (fingerprints, page per request, its
statistics), as a crawlee user would run it; storage is in memory so the disk is not measured.
With ``--wait-selector`` each page waits for that selector (``page.wait_for_selector``, 10 s) before it is read,
as a crawlee user handles a page that renders late; ``--html-out`` writes every page's HTML for the caller to
extract. Prints one JSON line: pages, seconds (from the first page handled to the last, so the browser launch
is outside the timing as in ours), pss_mb (the crawler's Playwright driver and Chromium, while the last
page is open, and their private USS) as one JSON line; the caller counts the proxy bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
from crawlee import ConcurrencySettings, service_locator
from crawlee.crawlers import PlaywrightCrawler, PlaywrightCrawlingContext, PlaywrightPreNavCrawlingContext
from crawlee.storage_clients import MemoryStorageClient
from playwright.async_api import Route
from process_memory import pss_by_kind

# Not a bench: tests/test_benches.py runs only the modules that declare PROMISED_KEYS.
NOT_A_BENCH = "the crawlee PlaywrightCrawler peer of bench/pageslots.py"


async def crawl(urls: list[str], chromium: str, args: list[str], proxy: str, blocked: set[str],
                sandbox: bool, wait_selector: str | None = None, html_out: Path | None = None) -> dict[str, float]:
    service_locator.set_storage_client(MemoryStorageClient())
    crawler = PlaywrightCrawler(
        concurrency_settings=ConcurrencySettings(min_concurrency=1, max_concurrency=1, desired_concurrency=1),
        browser_type="chromium", headless=True,
        browser_launch_options={"executable_path": chromium, "args": args, "chromium_sandbox": sandbox,
                                "proxy": {"server": proxy}},
        max_request_retries=0, request_handler_timeout=timedelta(seconds=30),
    )
    times: list[float] = []
    seen: dict[str, Any] = {"pss_by_kind": {}, "failed": 0, "timeouts": 0}
    pages: dict[str, str] = {}

    @crawler.pre_navigation_hook
    async def block_resources(context: PlaywrightPreNavCrawlingContext) -> None:
        async def intercept(route: Route) -> None:
            if route.request.resource_type in blocked:
                await route.abort("blockedbyclient")
            else:
                await route.continue_()

        await context.page.route("**/*", intercept)

    @crawler.router.default_handler
    async def handle(context: PlaywrightCrawlingContext) -> None:
        if wait_selector:  # what a crawlee user writes for a page that renders late
            try:
                await context.page.wait_for_selector(wait_selector, timeout=10_000)
            except Exception:
                seen["timeouts"] += 1
        text = await context.page.content()
        pages[context.request.url] = text
        if "SKU-" not in text and not wait_selector:
            seen["failed"] += 1
        times.append(time.perf_counter())
        if len(times) == len(urls):
            seen["pss_by_kind"] = pss_by_kind(psutil.Process(os.getpid()))

    await crawler.run(urls)
    if len(times) != len(urls) or seen["failed"]:
        raise SystemExit(f"crawlee handled {len(times)} of {len(urls)} pages, {seen['failed']} without the product")
    kinds = dict(seen["pss_by_kind"])
    uss = kinds.pop("uss", 0.0)
    if html_out is not None:
        html_out.write_text(json.dumps(pages))
    return {"pages": len(urls), "seconds": times[-1] - times[0], "pss_mb": sum(kinds.values()), "uss_mb": uss,
            "pss_by_kind": kinds, "wait_timeouts": seen["timeouts"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", required=True, help="a file with one URL a line")
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--blocked", default="", help="comma-separated resource types to abort")
    parser.add_argument("--arg", action="append", default=[], help="a Chromium flag (repeat)")
    parser.add_argument("--sandbox", action="store_true")
    parser.add_argument("--wait-selector", default=None, help="wait_for_selector before reading each page")
    parser.add_argument("--html-out", type=Path, default=None, help="write {url: html} of every page here")
    options = parser.parse_args()
    urls = [line.strip() for line in Path(options.urls).read_text().splitlines() if line.strip()]
    blocked = {kind for kind in options.blocked.split(",") if kind}
    result = asyncio.run(crawl(urls, options.chromium, options.arg, options.proxy, blocked, options.sandbox,
                               options.wait_selector, options.html_out))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
