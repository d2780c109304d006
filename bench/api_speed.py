"""The API part of bench/crawl.py: the demo shop's items harvested from its GraphQL endpoint (POST requests of 50
items, the next page by the connection's cursor) against the same items harvested as HTML detail pages
(listing -> details), both through the distributor and Celery workers, on a demo site of their own
(``--api-products`` items, 10,000 by default: the API's run then lasts seconds, long enough that start-up, the
distributor's first round and Celery's first delivery, is a small part of it; ``api_first_request_s`` says how
much). The keys:

- ``api_items_per_s``, ``html_items_per_s``: the harvester's own pace, both with the discard sink
  (``output_sink=discard``: every record built, validated and counted as stored, nothing written): records the
  workers counted as stored per second, from the first task pushed until the site served every page and the source
  is idle. ``api_speedup`` is their ratio (goal: >= 20). Both sides store nothing, so the ratio says what
  reading 50 items a POST saves over fetching and parsing a page an item, not what one MongoDB server can take in.
- ``api_mongo_items_per_s``: the API harvest again, into MongoDB (the records counted in the collection, per
  second); ``api_raw_upserts_per_s``: what the same server does with the same records in the same run, raw
  (unordered ``bulk_write``s of upserts on ``sku``, one page's 50 records each, one after another: what each hop
  of a chain writes); ``api_mongo_vs_raw``: the first over the second (goal about 1: the harvest stores as fast as
  the server can). The with-MongoDB figure is read as that ratio, never against the HTML crawl: into the SecantusDB
  stand-in the API stores at the stand-in's own raw rate, far below what the harvester reads.
- ``api_cpu_ms_per_item``, ``html_cpu_ms_per_item``: the distributor's and workers' CPU per item of the discard runs;
  ``api_requests``, ``html_requests``: what the demo site served each; ``api_seconds``: the API run's length;
  ``api_first_request_s``: how long after the first tasks were pushed the site saw the API's first request.

The cursor makes a query's pages a chain (each request needs the previous answer), so one chain's pace is one
request's round trip through a worker and the site per 50 items, where the HTML crawl keeps ``concurrency`` pages in
flight. The source therefore has ``--api-chains`` K first requests, segment 0..K-1 of K of the items (the demo
endpoint's ``variables.segment``/``totalSegments``, DynamoDB's parallel scan): K chains side by side
(``api_chains``). A chain is at most ``listing.max_depth``'s bound deep (50 after its first page): more items than
K chains of 51 pages stop the bench with a message to raise ``--api-chains``.
The API's records carry what the endpoint offers of the HTML pages' ten attributes (all but ``ratings`` and
``description``) and its item's ``link``: nine attributes a record against ten. Both run at the bench's
``--concurrency`` (the sources' ``max_active``, 16 by default): one politeness towards the site, under which the API
keeps at most ``api_chains`` requests in flight and the HTML crawl ``concurrency`` (``api_max_in_flight``,
``html_max_in_flight``: the most the site saw). The HTML crawl goes faster with more in flight (on the 2-core bench
machine 1.4-1.8x at 32: docs/benchmarks.md), at twice the load on the site: ``api_speedup`` compares the two ways
in at one politeness, not each at its fastest.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymongo
import yaml
from rig import deepest_listing, site_stats, start_demo_site  # bench/rig.py, beside this file

NOT_A_BENCH = "the API part of bench/crawl.py (a GraphQL source against HTML detail pages)"
PAGE_SIZE = 50
API_PRODUCTS = 10_000  # the API part's default size (``--api-products``)
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
            "max_depth": deepest_listing(), "max_new_urls": 1_000_000,
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
    """The headline, both runs with the discard sink: items a second, their ratio, and what each run took."""
    api_rate = api["stored"] / api["seconds"]
    html_rate = html["stored"] / html["seconds"]
    return {"api_items_per_s": round(api_rate, 1), "html_items_per_s": round(html_rate, 1),
            "api_speedup": round(api_rate / html_rate, 2) if html_rate else None,
            "api_requests": api["pages"], "api_records_stored": api["stored"], "html_requests": html["pages"],
            "html_records_stored": html["stored"], "api_products": products,
            "api_seconds": round(api["seconds"], 3), "api_first_request_s": api["first_request_s"],
            "api_max_in_flight": api["max_concurrent"], "html_max_in_flight": html["max_concurrent"],
            "api_cpu_ms_per_item": round(1000 * api["cpu_seconds"] / max(1, api["stored"]), 3),
            "html_cpu_ms_per_item": round(1000 * html["cpu_seconds"] / max(1, html["stored"]), 3)}


def first_request_s(run: dict[str, Any], site_url: str, client: str) -> float | None:
    """Seconds from pushing the first tasks until the demo site saw the client's first request (start-up: the
    distributor's round, Celery's delivery, the worker's batch), or None when the site no longer holds it (it keeps
    its last 500 request times)."""
    observed = site_stats(site_url, client)
    times = observed.get("request_times") or []
    if not times or len(times) < observed["total"]:
        return None
    return round(min(times) - run["pushed_at"], 3)


def api_part(processes: Any, env: dict[str, str], args: Any, run_harvester: Callable[..., dict[str, Any]],
             html_source: Callable[[str, str, int], tuple[Path, int]]) -> dict[str, Any]:
    """The same ``args.api_products`` items from the GraphQL endpoint (``args.api_chains`` chains) and as HTML detail
    pages (bench/crawl.py's ``run_harvester``, and ``html_source``: its listing -> details source over a shop, with the
    pages it fetches), on a demo site of their own. Each round runs the API and the HTML crawl with the discard sink,
    then the API into MongoDB; the best run of each is reported."""
    from harvester.services.ports import LOOPBACK

    products, chains = args.api_products, args.api_chains
    largest_segment = -(-products // chains)
    longest_chain = -(-largest_segment // PAGE_SIZE)  # its pages
    if longest_chain - 1 > deepest_listing():
        raise SystemExit(f"--api-products {products} is {longest_chain} pages a chain, deeper than a source may follow "
                         f"({deepest_listing()} after the first): raise --api-chains")
    _, port, site_url = start_demo_site(processes, "--products", str(products), "--latency-ms", str(args.latency_ms),
                                        "--slow-every", "0")
    env = {**env, "HARVESTER_ALLOWED_PRIVATE_NETWORKS":
           f"{env['HARVESTER_ALLOWED_PRIVATE_NETWORKS']},{LOOPBACK}/32:{port}"}
    uri, database = env["HARVESTER_MONGO_URI"], env["HARVESTER_MONGO_DATABASE"]
    stored = pymongo.MongoClient(uri)[database]
    expected = api_requests_expected(products, chains)
    runs: dict[str, list[dict[str, Any]]] = {"api": [], "html": [], "api_mongo": []}
    for round_number in range(1, args.repeat + 1):  # alternately, so load from other programs hits each
        for label, sink in (("api", "discard"), ("html", "discard"), ("api_mongo", "mongo")):
            name = f"api_{label}_{round_number}" if label != "html" else f"api_html_{round_number}"
            sink_env = {**env, "HARVESTER_OUTPUT_SINK": sink}
            if label == "html":
                path, pages = html_source(name, site_url, products)
                run = run_harvester(processes, sink_env, path, site_url, pages, args.workers)
            else:
                path = write_graphql_source(processes.sources, name, site_url, args.concurrency, chains)
                run = run_harvester(processes, sink_env, path, site_url, expected, args.workers,
                                    first_tasks=first_request_tasks(path))
                run["first_request_s"] = first_request_s(run, site_url, name)
            run["name"] = name
            run["stored"] = stored[name].count_documents({}) if sink == "mongo" else run["records"]
            runs[label].append(run)
    best = {label: max(results, key=lambda run: run["stored"] / run["seconds"]) for label, results in runs.items()}
    figures = {"api_chains": chains} | api_figures(best["api"], best["html"], products)
    mongo = best["api_mongo"]
    mongo_rate = mongo["stored"] / mongo["seconds"]
    raw = raw_upserts_per_s(uri, database, mongo["name"])
    figures |= {"api_mongo_items_per_s": round(mongo_rate, 1), "api_mongo_records_stored": mongo["stored"],
                "api_raw_upserts_per_s": round(raw, 1), "api_mongo_vs_raw": round(mongo_rate / raw, 3) if raw else None}
    print(f"discard sink: GraphQL API ({chains} chains) {best['api']['stored']} items in {best['api']['pages']} POSTs, "
          f"{figures['api_items_per_s']:.0f} items/s (first request after {figures['api_first_request_s']} s); HTML "
          f"detail pages {best['html']['stored']} items in {best['html']['pages']} pages, "
          f"{figures['html_items_per_s']:.0f} items/s: api_speedup {figures['api_speedup']}", file=sys.stderr)
    print(f"into MongoDB: GraphQL API {mongo['stored']} items, {mongo_rate:.0f} items/s; raw upserts of the same "
          f"records, 50 a bulk_write: {raw:.0f} records/s: api_mongo_vs_raw {figures['api_mongo_vs_raw']}",
          file=sys.stderr)
    return figures
