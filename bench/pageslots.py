"""Page-slot rendering: what a long-lived browser and resource blocking buy, on the demo site.

Starts the demo site on a free loopback port and renders its JavaScript product pages in Chromium:

- (a) ``hosted_pages_per_s``: one :class:`BrowserHost` (one browser, one page reused) renders the pages
  one after the other, as a page-slot worker does; blocking image, font, media and stylesheet;
- (b) ``one_shot_pages_per_s``: ``render_page`` per page (a browser launched per page, as `harvester try`
  does) -> ``hosted_vs_one_shot`` (what keeping the browser open buys);
- (c) the hosted run again with nothing blocked -> ``bytes_per_page_blocked`` and
  ``bytes_per_page_unblocked`` (response headers + bodies transferred, as Chromium counted them),
  ``blocked_requests_per_page``, and ``bytes_saved_per_page``: the measured difference, not an estimate.

Usage: .venv/bin/python bench/pageslots.py [--pages 60] [--one-shot-pages 10]
(the demo site serves /js/product/N without its artificial latency: these figures are the browser's.)
The JSON object on the last line carries every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harvester.config.model import SourceConfig
from harvester.pageslots.host import BrowserHost
from harvester.scraping.browser import render_page
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import HarvesterSettings

BIN = Path(sys.executable).parent
BLOCKED = ["image", "font", "media", "stylesheet"]


def source(base_url: str, blocked: list[str]) -> SourceConfig:
    return SourceConfig.model_validate({
        "name": "bench_pageslots", "render": "browser", "country": "SG",
        "input": {"kind": "details", "seeds": [f"{base_url}/js/product/1"]},
        "attributes": {"sku": {"css": "#app.ready span.sku::text", "required": True}},
        "output": {"key": ["sku"]}, "blocked_resource_types": blocked, "timeout": 30,
    })


async def hosted(settings: HarvesterSettings, urls: list[str], config: SourceConfig) -> dict[str, Any]:
    async with BrowserHost(settings) as host:
        await host.render(urls[0], config)  # launch outside the timing (a slot worker launches once)
        before = host.totals.snapshot()
        started = time.perf_counter()
        results = await host.render_all(urls, config)
        elapsed = time.perf_counter() - started
        outcomes = host.totals.outcomes_since(before)
    assert all(result.ok and "SKU-" in result.text for result in results), "a page did not render"
    return {"pages_per_s": len(urls) / elapsed,
            "bytes_per_page": outcomes.get("browser_transferred_bytes", 0) / len(urls),
            "blocked_requests_per_page": outcomes.get("browser_blocked_requests", 0) / len(urls)}


async def one_shot(settings: HarvesterSettings, urls: list[str], config: SourceConfig) -> float:
    started = time.perf_counter()
    for url in urls:
        result = await render_page(url, config, settings)
        assert result.ok, result.reason
    return len(urls) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--one-shot-pages", type=int, default=10)
    args = parser.parse_args()

    port = free_port()
    site = subprocess.Popen(
        [str(BIN / "harvester"), "demo-site", "--host", LOOPBACK, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        readiness.wait_until(lambda: readiness.tcp_open(LOOPBACK, port), 30, "demo site")
        base = f"http://{LOOPBACK}:{port}"
        settings = HarvesterSettings()
        urls = [f"{base}/js/product/{n}" for n in range(1, args.pages + 1)]
        blocked = asyncio.run(hosted(settings, urls, source(base, BLOCKED)))
        unblocked = asyncio.run(hosted(settings, urls, source(base, [])))
        shot = asyncio.run(one_shot(settings, urls[: args.one_shot_pages], source(base, BLOCKED)))
    finally:
        site.terminate()
        site.wait(timeout=10)
    result = {
        "pages": args.pages, "one_shot_pages": args.one_shot_pages,
        "hosted_pages_per_s": round(blocked["pages_per_s"], 2),
        "hosted_unblocked_pages_per_s": round(unblocked["pages_per_s"], 2),
        "one_shot_pages_per_s": round(shot, 2),
        "hosted_vs_one_shot": round(blocked["pages_per_s"] / shot, 2),
        "blocked_requests_per_page": round(blocked["blocked_requests_per_page"], 2),
        "bytes_per_page_blocked": round(blocked["bytes_per_page"]),
        "bytes_per_page_unblocked": round(unblocked["bytes_per_page"]),
        "bytes_saved_per_page": round(unblocked["bytes_per_page"] - blocked["bytes_per_page"]),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
