"""The crawlee-python peer of bench/broad.py: ParselCrawler over the same URLs with the same extraction (the title
and the price), each host throttled by crawlee's own per-domain limit (``ThrottlingRequestManager`` with a 2 s
crawl delay per host, what 30 requests a minute allows), retries and timeout as Harvester's.

crawlee is installed for the bench only (``pip install --target`` under var/bench-peers/, as bench/crawl.py does);
this module runs in its own process with that directory appended to ``sys.path``. The bench counts its pages at
the server and stops it once every live page was served.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

NOT_A_BENCH = "the crawlee peer of bench/broad.py"


async def crawl(urls: list[str], concurrency: int, timeout: float, retries: int, delay_seconds: int) -> None:
    from crawlee import ConcurrencySettings, Request, service_locator
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
    from crawlee.request_loaders import ThrottlingRequestManager
    from crawlee.storage_clients import MemoryStorageClient
    from crawlee.storages import RequestQueue

    storage = MemoryStorageClient()
    service_locator.set_storage_client(storage)  # the per-host queues the throttler opens stay in memory too
    hosts = sorted({urlsplit(url).hostname or "" for url in urls})
    queue = await RequestQueue.open(storage_client=storage)
    throttler = ThrottlingRequestManager(inner=queue, domains=hosts, request_manager_opener=RequestQueue.open)
    for host in hosts:
        throttler.set_crawl_delay(f"http://{host}/", delay_seconds)
    crawler = ParselCrawler(
        concurrency_settings=ConcurrencySettings(min_concurrency=concurrency, max_concurrency=concurrency,
                                                 desired_concurrency=concurrency),
        storage_client=storage, request_manager=throttler, max_request_retries=retries,
        navigation_timeout=timedelta(seconds=timeout), configure_logging=False,
        status_message_logging_interval=timedelta(hours=1),
    )

    @crawler.router.default_handler
    async def page(context: ParselCrawlingContext) -> None:
        await context.push_data({"url": context.request.url, "title": context.selector.css("h1::text").get(),
                                 "price": context.selector.css(".price::text").get()})

    await crawler.run([Request.from_url(url) for url in urls])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer-path", required=True, help="the bench-only directory crawlee is installed in")
    parser.add_argument("--urls", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--delay-seconds", type=int, default=2)
    args = parser.parse_args()
    sys.path.append(args.peer_path)  # after .venv's site-packages: the shared packages are Harvester's own
    logging.basicConfig(level=logging.WARNING)
    urls = json.loads(args.urls.read_text())
    asyncio.run(crawl(urls, args.concurrency, args.timeout, args.retries, args.delay_seconds))


if __name__ == "__main__":
    main()
