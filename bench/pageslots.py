"""Page slots: one slot's browser through its country's proxy on the demo site, and the allocator.

Starts the demo site and a counting forward proxy (`harvester forward-proxy`) on free loopback ports and
renders the demo's JavaScript product pages in ONE slot browser (:class:`harvester.pageslots.host.SlotBrowser`,
one Chromium, one page reused, launched through the proxy), one page after the other as a slot does:

- ``pages_per_min_per_slot`` with blocking (image, font, media, stylesheet) and without;
- ``proxy_bytes_per_page_blocked`` / ``_unblocked``: bytes that went through the proxy per page, counted
  AT the proxy (requests + responses), and ``bytes_cut`` = 1 - blocked / unblocked;
- ``slot_pss_mb``: PSS of the slot's Chromium process tree plus its Playwright driver after the run;
- ``allocator_ms``: census fold + allocation + preparation for 3000 recent tasks across 50 countries
  (the pure computation each DAG run does after its two Redis reads), median of 20.

Not measured yet (reported as null): crawlee-python's PlaywrightCrawler on the same pages.
Usage: .venv/bin/python bench/pageslots.py [--pages 60]. The JSON object on the last line carries every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from pathlib import Path
from typing import Any

import psutil
from harvester.config.model import SourceConfig
from harvester.distributor.browser_tasks import census_of
from harvester.pageslots.allocation import allocate_page_slots, page_slots_to_start
from harvester.pageslots.bookkeeping import country_tasks
from harvester.pageslots.host import SlotBrowser
from harvester.pageslots.proxies import Proxy
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


def proxy_stats(proxy_url: str, reset: bool = False) -> dict[str, Any]:
    request = urllib.request.Request(f"{proxy_url}/_proxy/{'reset' if reset else 'stats'}",
                                     method="POST" if reset else "GET", data=b"" if reset else None)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as response:
        return json.load(response)


SERVER_PIDS: set[int] = set()  # the demo site and the proxy: not the slot's


def pss_mb(root_pid: int) -> float:
    """PSS of this process's children that belong to the slot (Playwright's driver and Chromium)."""
    total = 0
    root = psutil.Process(root_pid)
    servers = set(SERVER_PIDS)
    for pid in SERVER_PIDS:
        try:
            servers |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            continue
    for process in root.children(recursive=True):
        if process.pid in servers:
            continue
        try:
            total += process.memory_full_info().pss
        except psutil.Error:
            continue
    return total / (1024 * 1024)


async def slot_run(settings: HarvesterSettings, proxy_url: str, urls: list[str], config: SourceConfig) -> dict:
    browser = SlotBrowser("bench-SG", Proxy("SG", proxy_url), settings)
    try:
        loaded = await browser.load(urls[0], config)  # launch outside the timing (a slot launches once)
        assert not loaded.load_failed, loaded.fetch.reason
        proxy_stats(proxy_url, reset=True)
        started = time.perf_counter()
        for url in urls:
            loaded = await browser.load(url, config)
            assert loaded.fetch.ok and "SKU-" in loaded.fetch.text, loaded.fetch.reason
        elapsed = time.perf_counter() - started
        seen = proxy_stats(proxy_url)
        pss = pss_mb(os.getpid())
    finally:
        await browser.close()
    return {"pages_per_min": 60 * len(urls) / elapsed, "proxy_bytes_per_page": seen["bytes"] / len(urls),
            "proxy_requests_per_page": seen["requests"] / len(urls), "pss_mb": pss}


def allocator_ms() -> float:
    rng = random.Random(7)
    countries = [f"{chr(65 + i // 26)}{chr(65 + i % 26)}" for i in range(50)]
    entries = [f"{rng.choice(countries)}|{rng.choice(['pending', 'running', 'completed', 'completed'])}|"
               f"{1000 - rng.random() * 120:.6f}" for _ in range(3000)]
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        census = census_of(entries, 1000.0)
        slots = allocate_page_slots({c: country_tasks(v) for c, v in census.items()}, 20, 50.0)
        page_slots_to_start(slots, {c: v.active for c, v in census.items()}, Fraction(1, 3))
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=60)
    args = parser.parse_args()
    site_port, proxy_port = free_port(), free_port()
    processes = [
        subprocess.Popen([str(BIN / "harvester"), "demo-site", "--host", LOOPBACK, "--port", str(site_port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([str(BIN / "harvester"), "forward-proxy", "--host", LOOPBACK, "--port", str(proxy_port),
                          "--label", "SG"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    SERVER_PIDS.update(process.pid for process in processes)
    try:
        for port in (site_port, proxy_port):
            readiness.wait_until(lambda port=port: readiness.tcp_open(LOOPBACK, port), 30, f"port {port}")
        base, proxy_url = f"http://{LOOPBACK}:{site_port}", f"http://{LOOPBACK}:{proxy_port}"
        settings = HarvesterSettings()
        urls = [f"{base}/js/product/{n}" for n in range(1, args.pages + 1)]
        blocked = asyncio.run(slot_run(settings, proxy_url, urls, source(base, BLOCKED)))
        unblocked = asyncio.run(slot_run(settings, proxy_url, urls, source(base, [])))
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
    result = {
        "pages": args.pages,
        "pages_per_min_per_slot": {"blocking": round(blocked["pages_per_min"]),
                                   "no_blocking": round(unblocked["pages_per_min"])},
        "proxy_bytes_per_page_blocked": round(blocked["proxy_bytes_per_page"]),
        "proxy_bytes_per_page_unblocked": round(unblocked["proxy_bytes_per_page"]),
        "proxy_requests_per_page": {"blocking": blocked["proxy_requests_per_page"],
                                    "no_blocking": unblocked["proxy_requests_per_page"]},
        "bytes_cut": round(1 - blocked["proxy_bytes_per_page"] / unblocked["proxy_bytes_per_page"], 3),
        "slot_pss_mb": round(blocked["pss_mb"], 1),
        "allocator_ms": round(allocator_ms(), 2),
        "crawlee_pages_per_min": None, "ratio": None, "crawlee_pss_mb": None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
