"""The Scrapy peer of bench/broad.py: Scrapy's documented broad-crawl settings over the same URLs, the same
extraction (the title and the price), one request in flight per host and a 2 s download delay.

Run by bench/broad.py in its own process with Scrapy from the bench-only peer directory on ``PYTHONPATH``;
the bench counts its pages at the server and stops it when every live page was served.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess

NOT_A_BENCH = "the Scrapy peer of bench/broad.py"


class BroadSpider(scrapy.Spider):
    name = "broad"

    def __init__(self, urls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls

    async def start(self) -> Any:
        for url in self.urls:
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("h1::text").get(),
               "price": response.css(".price::text").get()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--retries", type=int, default=2)
    arguments = parser.parse_args()
    urls = json.loads(arguments.urls.read_text())
    process = CrawlerProcess({
        # https://docs.scrapy.org/en/latest/topics/broad-crawls.html
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "CONCURRENT_REQUESTS": arguments.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 2,
        "REACTOR_THREADPOOL_MAXSIZE": 20,
        "LOG_LEVEL": "INFO",
        "COOKIES_ENABLED": False,
        "REDIRECT_ENABLED": False,
        "RETRY_ENABLED": True,
        "RETRY_TIMES": arguments.retries,
        "DOWNLOAD_TIMEOUT": arguments.timeout,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
    })
    process.crawl(BroadSpider, urls=urls)
    process.start()


if __name__ == "__main__":
    main()
