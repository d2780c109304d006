"""The API part of bench/crawl.py: the demo shop's items harvested from its GraphQL endpoint (POST requests of 50
items, the next page by the connection's cursor) against the same items harvested as HTML detail pages
(listing -> details), both through the distributor and Celery workers into MongoDB, on the same demo site.

``api_items_per_s`` and ``html_items_per_s`` are records stored per second from the first task pushed until the
site served every page and the source is idle; ``api_speedup`` is their ratio (goal >= 20). The cursor makes
a query's pages a chain (each request needs the previous answer), so one chain's pace is one request's round trip
through a worker and the site per 50 items, where the HTML crawl keeps ``concurrency`` pages in flight. The source
therefore has ``--api-chains`` K first requests, segment 0..K-1 of K of the items (the demo endpoint's
``variables.segment``/``totalSegments``, DynamoDB's parallel scan): K chains side by side (``api_chains``).
``api_raw_upserts_per_s`` is what the same MongoDB does with the same records in the same run, raw: unordered
``bulk_write``s of upserts on ``sku``, one page's 50 records each, one after another (what each hop of a chain
writes); ``api_mongo_vs_raw`` the into-MongoDB harvest against it.
The API's records carry what the endpoint offers of the HTML pages' ten attributes (all but ``ratings`` and
``description``) and its item's ``link``: nine attributes a record against ten. Both run at the bench's
``--concurrency`` (16 by default); the HTML crawl is not always at its best there (on the 2-core bench machine it
was 1.4x faster at 32: docs/benchmarks.md, 2026-12-05), so compare at its best before reading ``api_speedup``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymongo
import yaml

NOT_A_BENCH = "the API part of bench/crawl.py (a GraphQL source against HTML detail pages)"
PAGE_SIZE = 50
QUERY = ("query Products($first: Int!, $after: String, $segment: Int, $totalSegments: Int) { products(first: $first, "
         "after: $after, segment: $segment, totalSegments: $totalSegments) "
         "{ edges { node { sku title price stock in_stock released image tags url } } "
         "pageInfo { endCursor hasNextPage } } }")


def write_graphql_source(directory: Path, name: str, site_url: str, concurrency: int, chains: int = 1) -> Path:
    """The GraphQL source: ``chains`` first requests, segment 0..chains-1 of ``chains`` (one chain: every item)."""
    partitions = [{}] if chains == 1 else [{"segment": segment, "totalSegments": chains} for segment in range(chains)]
    document = {
        "name": name, "content": "json", "harvesting_lag": 0, "headers": {"X-Demo-Client": name},
        "rate_limit": {"max_active": max(concurrency, chains), "per_minute": 1_000_000}, "retries": 2,
        "timeout": 30,
        "input": {"requests": [{"url": f"{site_url}/graphql",
                                "json": {"query": QUERY, "variables": {"first": PAGE_SIZE, **partition}}}
                               for partition in partitions]},
        "listing": {
            "max_depth": 50, "max_new_urls": 1_000_000,
            "next": {"cursor": "data.products.pageInfo.endCursor", "into": "variables.after",
                     "while": "data.products.pageInfo.hasNextPage"},
            "records": {"item": "json:data.products.edges[].node", "key": ["sku"], "attributes": {
                "sku": {"json": "sku", "required": True}, "title": {"json": "title"},
                "price": {"json": "price", "type": "price"}, "stock": {"json": "stock", "type": "int"},
                "in_stock": {"json": "in_stock", "type": "bool"}, "released": {"json": "released", "type": "date"},
                "image": {"json": "image", "type": "url"}, "tags": {"json": "tags", "type": "list[str]"},
                "link": {"json": "url", "type": "url"}}}},
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def api_requests_expected(products: int, chains: int) -> int:
    """POSTs the K chains send for ``products`` items: each segment's items in pages of 50, at least one page."""
    sizes = [len(range(segment or chains, products + 1, chains)) for segment in range(chains)]
    return sum(max(1, -(-size // PAGE_SIZE)) for size in sizes)


def first_request_tasks(source_path: Path) -> list[Any]:
    """The source's first requests as tasks (what the producer pushes for ``input.requests``)."""
    from harvester.config.loader import load_source_file
    from harvester.distributor import TaskMessage

    source = load_source_file(source_path)
    return [TaskMessage(source=source.name, kind="listing", url=seed.url, request=seed.request)
            for seed in source.input.requests]


def records_and_fresh_copy(client: pymongo.MongoClient, database: str, collection: str, suffix: str,
                           key: str) -> tuple[list[dict[str, Any]], Any]:
    """A harvest's records as stored (without ``_id``) and an empty collection ``{collection}_{suffix}`` of the
    same server with a unique index on ``key``: what a raw-store figure upserts them into again."""
    records = [{name: value for name, value in document.items() if name != "_id"}
               for document in client[database][collection].find({})]
    target = client[database][f"{collection}_{suffix}"]
    target.drop()
    target.create_index(key, unique=True)
    return records, target


def raw_upserts_per_s(uri: str, database: str, collection: str) -> float:
    """The records of ``collection`` read back and upserted again, raw, into a fresh collection of the same server
    with a unique index on ``sku``: one unordered ``bulk_write`` a page of 50, one after another."""
    client = pymongo.MongoClient(uri)
    records, target = records_and_fresh_copy(client, database, collection, "raw", "sku")
    started = time.perf_counter()
    for start in range(0, len(records), PAGE_SIZE):
        target.bulk_write([pymongo.ReplaceOne({"sku": record["sku"]}, record, upsert=True)
                           for record in records[start:start + PAGE_SIZE]], ordered=False)
    seconds = time.perf_counter() - started
    client.close()
    return len(records) / seconds if seconds > 0 else 0.0


def api_figures(api: dict[str, Any], html: dict[str, Any], products: int) -> dict[str, Any]:
    api_rate = api["stored"] / api["seconds"]
    html_rate = html["stored"] / html["seconds"]
    return {"api_items_per_s": round(api_rate, 1), "html_items_per_s": round(html_rate, 1),
            "api_speedup": round(api_rate / html_rate, 2) if html_rate else None,
            "api_requests": api["pages"], "api_records_stored": api["stored"], "html_requests": html["pages"],
            "html_records_stored": html["stored"], "api_products": products,
            "api_cpu_ms_per_item": round(1000 * api["cpu_seconds"] / max(1, api["stored"]), 3),
            "html_cpu_ms_per_item": round(1000 * html["cpu_seconds"] / max(1, html["stored"]), 3)}


def api_part(processes: Any, env: dict[str, str], site_url: str, args: Any, html_pages: int,
             run_harvester: Callable[..., dict[str, Any]], write_html_source: Callable[[str], Path]) -> dict[str, Any]:
    """The same items from the GraphQL endpoint (``args.api_chains`` chains) and as HTML detail pages (bench/crawl.py's
    ``run_harvester`` and its listing -> details source), alternately, best round of each: into MongoDB (the figures
    the issue names, and the raw upserts of the same records beside them), then with the discard sink (what the
    harvest costs without the store, whose per-record cost bounds both on the stand-in)."""
    figures: dict[str, Any] = {"api_chains": args.api_chains}
    uri, database = env["HARVESTER_MONGO_URI"], env["HARVESTER_MONGO_DATABASE"]
    expected = api_requests_expected(args.products, args.api_chains)
    for sink in ("mongo", "discard"):
        runs: dict[str, list[dict[str, Any]]] = {"api": [], "html": []}
        stored = pymongo.MongoClient(uri)[database]
        sink_env = {**env, "HARVESTER_OUTPUT_SINK": sink}
        for round_number in range(1, args.repeat + 1):
            api_name, html_name = f"api_graphql_{sink}_{round_number}", f"api_html_{sink}_{round_number}"
            api_path = write_graphql_source(processes.sources, api_name, site_url, args.concurrency, args.api_chains)
            runs["api"].append(run_harvester(processes, sink_env, api_path, site_url, expected, args.workers,
                                             first_tasks=first_request_tasks(api_path)))
            runs["api"][-1]["name"] = api_name
            runs["html"].append(run_harvester(processes, sink_env, write_html_source(html_name), site_url,
                                              html_pages, args.workers))
            for run, name in ((runs["api"][-1], api_name), (runs["html"][-1], html_name)):
                run["stored"] = stored[name].count_documents({}) if sink == "mongo" else run["records"]
        best = {name: max(results, key=lambda run: run["stored"] / run["seconds"]) for name, results in runs.items()}
        found = api_figures(best["api"], best["html"], args.products)
        print(f"{sink} sink: GraphQL API ({args.api_chains} chains) {best['api']['stored']} items in "
              f"{best['api']['pages']} POSTs, {found['api_items_per_s']:.0f} items/s; HTML detail pages "
              f"{best['html']['stored']} items in {best['html']['pages']} pages, {found['html_items_per_s']:.0f} "
              f"items/s: api_speedup {found['api_speedup']}", file=sys.stderr)
        if sink == "mongo":
            raw = raw_upserts_per_s(uri, database, best["api"]["name"])
            figures |= found | {"api_raw_upserts_per_s": round(raw, 1),
                                "api_mongo_vs_raw": round(found["api_items_per_s"] / raw, 3) if raw else None}
            print(f"raw upserts of the same records, 50 a bulk_write: {raw:.0f} records/s", file=sys.stderr)
        else:
            figures |= {f"{key}_discard": value for key, value in found.items() if key.endswith(("_per_s", "speedup"))}
    return figures
