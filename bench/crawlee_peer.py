"""The crawlee-python peer of bench/crawl.py: ParselCrawler on the same site with the same concurrency and
the same extraction (Harvester's own link discovery and extraction functions, on crawlee's parsel selector).

crawlee is installed for the bench only, by bench/crawl.py (``pip install --target`` under var/bench-peers/,
constrained by requirements.lock, so every package it shares with Harvester is the same version); this
module runs in its own process with that directory appended to ``sys.path``. crawlee's default HTTP
client (impit) is used as it comes; its request queue is crawlee's in-memory storage (as Scrapy's
scheduler is in memory), which is a faster peer than its default file-system storage.

Prints one JSON line: {"pages": N, "items": N, "seconds": S, "cpu_seconds": C, "run_seconds": R}. The
seconds and CPU run from the start of ``crawler.run`` to the end of the last page's handler (crawlee's own
shutdown after that is not counted, in its favour).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

TIMES: dict[str, float] = {}
# Not a bench: tests/test_benches.py runs only the modules that declare PROMISED_KEYS.
NOT_A_BENCH = "the crawlee peer of bench/crawl.py"
COUNTS = {"pages": 0, "items": 0}


async def crawl(source: Any, concurrency: int) -> None:
    """One crawl of the source's seed: listing pages queue their details and next pages, details give records."""
    from crawlee import ConcurrencySettings, Request
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
    from crawlee.storage_clients import MemoryStorageClient
    from harvester.scraping.discovery.links import discover_links
    from harvester.scraping.extraction.extractor import extract_record
    from harvester.scraping.page import record_url

    headers = {"Accept": "text/html", **source.headers}

    def request(url: str, label: str, depth: int = 0) -> Request:
        return Request.from_url(url, label=label, headers=headers, user_data={"depth": depth})

    crawler = ParselCrawler(
        concurrency_settings=ConcurrencySettings(min_concurrency=concurrency, max_concurrency=concurrency,
                                                 desired_concurrency=concurrency),
        storage_client=MemoryStorageClient(), max_request_retries=source.retries,
        navigation_timeout=timedelta(seconds=source.timeout), configure_logging=False,
        status_message_logging_interval=timedelta(hours=1),
    )

    def handled() -> None:
        COUNTS["pages"] += 1
        TIMES["last_page"] = time.perf_counter()
        TIMES["cpu_last_page"] = time.process_time()

    @crawler.router.handler("listing")
    async def listing(context: ParselCrawlingContext) -> None:
        depth = int(context.request.user_data.get("depth", 0))
        page_url = context.request.loaded_url or context.request.url
        discovery = discover_links(source, page_url, context.selector, depth)
        await context.add_requests([request(url, "detail") for url in discovery.details]
                                   + [request(url, "listing", depth + 1) for url in discovery.listings])
        handled()

    @crawler.router.handler("detail")
    async def detail(context: ParselCrawlingContext) -> None:
        page_url = context.request.loaded_url or context.request.url
        extraction = extract_record(source, context.selector, record_url(context.request.url), page_url)
        if extraction.record is not None:
            COUNTS["items"] += 1
        handled()

    TIMES["opened"] = time.perf_counter()
    TIMES["cpu_opened"] = time.process_time()
    await crawler.run([request(source.input.seeds[0], "listing")])
    TIMES["closed"] = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer-path", required=True, help="the bench-only directory crawlee is installed in")
    parser.add_argument("--source-file", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()
    sys.path.append(args.peer_path)  # after .venv's site-packages: the shared packages are Harvester's own
    logging.basicConfig(level=logging.WARNING)
    from harvester.config.loader import load_source_file

    source = load_source_file(Path(args.source_file))
    asyncio.run(crawl(source, args.concurrency))
    print(json.dumps({**COUNTS, "seconds": TIMES["last_page"] - TIMES["opened"],
                      "cpu_seconds": TIMES["cpu_last_page"] - TIMES["cpu_opened"],
                      "run_seconds": TIMES["closed"] - TIMES["opened"]}))


if __name__ == "__main__":
    main()
