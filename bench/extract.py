"""Extraction from the page's own data: CPU per page, and requests saved by listing records.

Starts its own redis-server, MongoDB (HARVESTER_MONGO_URI, else mongod, else the SecantusDB stand-in)
and demo site on free loopback ports.

- (a) ``jsonld_cpu_ratio`` (goal <= 1.0): the CPU per page of a ``jsonld:`` source over the CSS source
  for the same fields (title, sku, price, stock, in_stock, released, image), each on its own demo page
  shape (``/ld/product/<n>`` and ``/product/<n>``): fetching with Harvester's fetcher and processing the
  page as a worker does (``process_page``), in this process, rounds alternating, the best round of each
  reported. ``jsonld_extract_cpu_ratio`` is the same for the processing alone (parse and extract).
- (b) ``listing_records_request_ratio`` (goal <= 0.1): the requests the demo site counted for a
  ``listing.records`` source against a listing + details source that stores the same records (500
  products, 50 a listing page), both run through the worker path (intake, admission, the batch runner,
  MongoDB), and checked to have stored the same records.

Usage: .venv/bin/python bench/extract.py [--pages 300] [--repeat 3] [--products 500] [--per-page 50] [--smoke]
``--smoke`` (CI: tests/test_benches.py): 10 pages, one round, 20 products at 10 a listing page; no logs kept.
The JSON object on the last line carries every figure and ``mongo`` (which server answered).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pymongo
import yaml
from rig import bench_processes, run_until_idle, site_stats, start_demo_site, start_mongo, start_redis

FIELDS = ("title", "sku", "price", "stock", "in_stock", "released", "image")
PRODUCT = {"type": "Product"}
# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "date", "mongo", "pages", "css_cpu_ms_per_page", "jsonld_cpu_ms_per_page", "jsonld_cpu_ratio",
    "css_extract_cpu_ms_per_page", "jsonld_extract_cpu_ms_per_page", "jsonld_extract_cpu_ratio", "products",
    "per_page", "listing_records_requests", "listing_details_requests", "listing_records_request_ratio", "goals",
)


def ld(path: str, **extra: Any) -> dict[str, Any]:
    return {"jsonld": {**PRODUCT, "path": path}, **extra}


CSS_ATTRIBUTES = {
    "title": {"css": "h1.title::text"}, "sku": {"css": "span.sku::text", "required": True},
    "price": {"css": "span.price::text", "type": "price"}, "stock": {"css": "span.stock::text", "type": "int"},
    "in_stock": {"css": "span.in-stock::text", "type": "bool"},
    "released": {"css": "time.released::attr(datetime)", "type": "date"},
    "image": {"css": "img.photo::attr(src)", "type": "url"},
}
JSONLD_ATTRIBUTES = {
    "title": ld("name"), "sku": ld("sku", required=True), "price": ld("offers", type="price"),
    "stock": ld("offers.inventoryLevel.value", type="int"), "in_stock": ld("offers.availability", type="bool"),
    "released": ld("releaseDate", type="date"), "image": ld("image", type="url"),
}


def source_config(name: str, attributes: dict[str, Any], seeds: list[str], **fields: Any) -> Any:
    from harvester.config.model import SourceConfig

    return SourceConfig.model_validate({"name": name, "input": {"kind": "details", "seeds": seeds},
                                        "attributes": attributes, "robots": "ignore", "timeout": 20,
                                        "headers": {"X-Demo-Client": name}, **fields})


async def fetch_and_process(settings: Any, source: Any, urls: list[str]) -> tuple[float, float, list[dict]]:
    """CPU seconds of fetching and processing ``urls`` (and of the processing alone), and the records."""
    from harvester.scraping.fetching.fetcher import Fetcher
    from harvester.scraping.page import process_page

    async with Fetcher(settings, max_connections=16) as fetcher:
        await fetcher.fetch(urls[0], source)  # a warm connection pool and import state for both sources
        started = time.process_time()
        fetched = (await fetcher.fetch_all(urls, source)).results
        extract_started = time.process_time()
        pages = [process_page(source, "details", url, 0, fetch) for url, fetch in zip(urls, fetched, strict=True)]
        ended = time.process_time()
    records = [page.extraction.record for page in pages if page.extraction and page.extraction.record]
    return ended - started, ended - extract_started, records


def cpu_ratio(settings: Any, site_url: str, pages: int, repeat: int) -> dict[str, Any]:
    numbers = list(range(1, pages + 1))
    css = source_config("bench_css", CSS_ATTRIBUTES, [f"{site_url}/product/1"])
    jsonld = source_config("bench_jsonld", JSONLD_ATTRIBUTES, [f"{site_url}/ld/product/1"])
    best: dict[str, tuple[float, float]] = {}
    records: dict[str, list[dict]] = {}
    for _ in range(repeat):
        for label, source, path in (("css", css, "/product/{}"), ("jsonld", jsonld, "/ld/product/{}")):
            total, extract, found = asyncio.run(fetch_and_process(settings, source, [
                site_url + path.format(n) for n in numbers]))
            if label not in best or total < best[label][0]:
                best[label] = (total, extract)
            records[label] = found
    same = sorted((r["sku"], *(str(r[f]) for f in FIELDS if f != "image")) for r in records["css"]) == sorted(
        (r["sku"], *(str(r[f]) for f in FIELDS if f != "image")) for r in records["jsonld"])
    if len(records["css"]) != pages or not same:
        raise SystemExit(f"the CSS and JSON-LD sources did not give the same {pages} records")
    css_ms, jsonld_ms = (best[label][0] * 1000 / pages for label in ("css", "jsonld"))
    css_extract_ms, jsonld_extract_ms = (best[label][1] * 1000 / pages for label in ("css", "jsonld"))
    return {"pages": pages, "css_cpu_ms_per_page": round(css_ms, 3), "jsonld_cpu_ms_per_page": round(jsonld_ms, 3),
            "jsonld_cpu_ratio": round(jsonld_ms / css_ms, 3),
            "css_extract_cpu_ms_per_page": round(css_extract_ms, 3),
            "jsonld_extract_cpu_ms_per_page": round(jsonld_extract_ms, 3),
            "jsonld_extract_cpu_ratio": round(jsonld_extract_ms / css_extract_ms, 3)}


def harvest(settings: Any, document: dict[str, Any], timeout: float = 300.0) -> int:
    """Run one listing source through the worker path until idle; the records it stored."""
    from harvester.config.loader import load_source_file
    from harvester.distributor import Intake, RateLimitStore, TaskMessage
    from harvester.workers.batch import BatchRunner

    path = settings.sources_dir / f"{document['name']}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    source = load_source_file(path)
    runner = BatchRunner(settings)
    try:
        intake, store = Intake(runner.redis, settings), RateLimitStore(runner.redis, settings)
        intake.push(source, [TaskMessage(source=source.name, kind="listing", url=source.input.seeds[0])])
        if not run_until_idle(runner, store, source.name, 0.05, time.monotonic() + timeout):
            raise SystemExit(f"{source.name} did not finish within {timeout:.0f}s")
        return runner.data.collection(source).count_documents({})
    finally:
        runner.close()


def request_ratio(settings: Any, site_url: str, products: int, per_page: int) -> dict[str, Any]:
    seed = f"{site_url}/catalog?per_page={per_page}"
    common = {"input": {"kind": "listing", "seeds": [seed]}, "robots": "ignore", "retries": 0,
              "rate_limit": {"max_active": 8, "per_minute": 1_000_000}}
    records = {"name": "bench_listing_records", **common, "headers": {"X-Demo-Client": "bench_listing_records"},
               "listing": {"next_page_selectors": ["a.next"], "max_depth": 50, "records": {
                   "item": {"jsonld": {"type": "ItemList", "path": "itemListElement[].item"}}, "key": ["sku"],
                   "attributes": {"sku": {"json": "sku", "required": True}, "title": {"json": "name"},
                                  "price": {"json": "offers", "type": "price"},
                                  "stock": {"json": "offers.inventoryLevel.value", "type": "int"}}}}}
    details = {"name": "bench_listing_details", **common, "headers": {"X-Demo-Client": "bench_listing_details"},
               "listing": {"link_selectors": ["a.card-link::attr(href)"], "next_page_selectors": ["a.next"],
                           "follow": r"/ld/product/\d+$", "max_depth": 50, "max_new_urls": 100_000},
               "attributes": {name: JSONLD_ATTRIBUTES[name] for name in ("sku", "title", "price", "stock")},
               "output": {"key": ["sku"]}}
    stored_records = harvest(settings, records)
    stored_details = harvest(settings, details)
    database = pymongo.MongoClient(settings.mongo_uri)[settings.mongo_database]

    def rows(name: str) -> list[tuple]:
        return sorted((r["sku"], r["title"], str(r["price"]), r["stock"])
                      for r in database[name].find({}, {"_id": 0, "sku": 1, "title": 1, "price": 1, "stock": 1}))

    if not (stored_records == stored_details == products) or rows("bench_listing_records") != rows(
            "bench_listing_details"):
        raise SystemExit(f"the two sources did not store the same {products} records "
                         f"({stored_records} and {stored_details})")
    asked_records = site_stats(site_url, "bench_listing_records")["total"]
    asked_details = site_stats(site_url, "bench_listing_details")["total"]
    return {"products": products, "per_page": per_page, "listing_records_requests": asked_records,
            "listing_details_requests": asked_details,
            "listing_records_request_ratio": round(asked_records / asked_details, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=300, help="pages per source for the CPU ratio")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the CPU ratio; the best of each")
    parser.add_argument("--products", type=int, default=500)
    parser.add_argument("--per-page", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="10 pages, one round, 20 products (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.repeat, args.products, args.per_page = 10, 1, 20, 10

    from harvester.services.ports import LOOPBACK
    from harvester.settings import HarvesterSettings

    with bench_processes("extract", keep=not args.smoke) as processes:  # its logs stay for a look after the run
        sources = processes.sources
        redis_url = start_redis(processes)
        choice, _ = start_mongo(processes)
        _, site_port, site_url = start_demo_site(processes, "--products", str(args.products), "--latency-ms", "0",
                                                 "--slow-every", "0")
        database = "harvester_bench_extract"
        os.environ.update({"HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": choice.uri,
                           "HARVESTER_MONGO_DATABASE": database, "HARVESTER_SOURCES_DIR": str(sources),
                           "HARVESTER_ALLOWED_PRIVATE_NETWORKS": f"{LOOPBACK}/32:{site_port}"})
        from harvester.settings import get_settings

        get_settings.cache_clear()
        settings = HarvesterSettings()
        pymongo.MongoClient(choice.uri).drop_database(database)
        print(f"MongoDB: {choice.describe()}; demo site {site_url}", file=sys.stderr)
        result: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "mongo": choice.kind}
        result.update(cpu_ratio(settings, site_url, min(args.pages, args.products), args.repeat))
        print(f"CPU per page: CSS {result['css_cpu_ms_per_page']} ms, JSON-LD {result['jsonld_cpu_ms_per_page']} ms",
              file=sys.stderr)
        result.update(request_ratio(settings, site_url, args.products, args.per_page))
        result["goals"] = {"jsonld_cpu_ratio": "<= 1.0", "listing_records_request_ratio": "<= 0.1"}
        print(json.dumps(result))


if __name__ == "__main__":
    main()
