"""The Scrapy peer of bench/crawl.py: the same crawl with the same concurrency and the same extraction
(Harvester's own link discovery and extraction functions, on Scrapy's parsel selectors).

Run by bench/crawl.py in its own process (Twisted owns the process); prints one JSON line:
{"pages": N, "items": N, "seconds": S}. With --mongo-uri, an item pipeline writes batched bulk upserts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pymongo
import scrapy
from harvester.config.loader import load_source_file
from harvester.scraping.discovery.links import discover_links
from harvester.scraping.extraction.extractor import extract_record
from harvester.scraping.page import record_url
from scrapy.crawler import CrawlerProcess

SOURCE: Any = None
TIMES: dict[str, float] = {}
# Not a bench: tests/test_benches.py runs only the modules that declare PROMISED_KEYS.
NOT_A_BENCH = "the Scrapy peer of bench/crawl.py"
COUNTS = {"pages": 0, "items": 0}


class BulkUpsertPipeline:
    """Batched bulk upserts keyed by url, as a careful Scrapy user would write them."""

    batch_size = 100

    def __init__(self, uri: str, database: str, collection: str) -> None:
        self.client = pymongo.MongoClient(uri)
        self.collection = self.client[database][collection]
        self.collection.create_index("url", unique=True)
        self.pending: list[pymongo.UpdateOne] = []

    @classmethod
    def from_crawler(cls, crawler: Any) -> BulkUpsertPipeline:
        settings = crawler.settings
        return cls(settings["PEER_MONGO_URI"], settings["PEER_MONGO_DATABASE"], settings["PEER_MONGO_COLLECTION"])

    def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        self.pending.append(pymongo.UpdateOne({"url": item["url"]},
                                              {"$set": {**item, "harvested_at": now},
                                               "$setOnInsert": {"first_seen_at": now}}, upsert=True))
        if len(self.pending) >= self.batch_size:
            self.flush()
        return item

    def flush(self) -> None:
        if self.pending:
            self.collection.bulk_write(self.pending, ordered=False)
            self.pending = []

    def close_spider(self) -> None:
        self.flush()
        self.client.close()


class PeerSpider(scrapy.Spider):
    name = "peer"

    def __init__(self, seed: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seed = seed

    async def start(self) -> Any:
        TIMES["opened"] = time.perf_counter()
        TIMES["cpu_opened"] = time.process_time()
        yield scrapy.Request(self.seed, callback=self.parse_listing, cb_kwargs={"depth": 0})

    def closed(self, reason: str) -> None:
        TIMES["closed"] = time.perf_counter()
        TIMES["cpu_closed"] = time.process_time()

    def parse_listing(self, response: Any, depth: int) -> Any:
        COUNTS["pages"] += 1
        discovery = discover_links(SOURCE, response.url, response.selector, depth)
        for url in discovery.details:
            yield scrapy.Request(url, callback=self.parse_detail)
        for url in discovery.listings:
            yield scrapy.Request(url, callback=self.parse_listing, cb_kwargs={"depth": depth + 1})

    def parse_detail(self, response: Any) -> Any:
        COUNTS["pages"] += 1
        extraction = extract_record(SOURCE, response.selector, record_url(response.request.url), response.url)
        if extraction.record is not None:
            COUNTS["items"] += 1
            yield extraction.record


def main() -> None:
    global SOURCE
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-file", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--mongo-uri")
    parser.add_argument("--database", default="bench")
    parser.add_argument("--collection", default="scrapy_peer")
    args = parser.parse_args()
    SOURCE = load_source_file(Path(args.source_file))
    settings: dict[str, Any] = {
        "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False, "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency, "DOWNLOAD_DELAY": 0, "AUTOTHROTTLE_ENABLED": False,
        "DOWNLOAD_TIMEOUT": SOURCE.timeout, "USER_AGENT": "bench-scrapy-peer",
        "DEFAULT_REQUEST_HEADERS": {"Accept": "text/html", **SOURCE.headers}, "DOWNLOAD_MAXSIZE": 5 * 1024 * 1024,
        "DEPTH_LIMIT": 0, "STATS_DUMP": False, "EXTENSIONS": {"scrapy.extensions.telnet.TelnetConsole": None},
    }
    if args.mongo_uri:
        settings.update({"ITEM_PIPELINES": {BulkUpsertPipeline: 300}, "PEER_MONGO_URI": args.mongo_uri,
                         "PEER_MONGO_DATABASE": args.database, "PEER_MONGO_COLLECTION": args.collection})
    process = CrawlerProcess(settings)
    process.crawl(PeerSpider, seed=SOURCE.input.seeds[0])
    process.start()
    print(json.dumps({**COUNTS, "seconds": TIMES["closed"] - TIMES["opened"],
                      "cpu_seconds": TIMES["cpu_closed"] - TIMES["cpu_opened"]}))


if __name__ == "__main__":
    main()
