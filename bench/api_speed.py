"""The API part of bench/crawl.py: the demo shop's items harvested from its GraphQL endpoint (POST requests of 50
items, the next page by the connection's cursor) against the same items harvested as HTML detail pages
(listing -> details), both through the distributor and Celery workers into MongoDB, on the same demo site.

``api_items_per_s`` and ``html_items_per_s`` are records stored per second from the first task pushed until the
site served every page and the source is idle; ``api_speedup`` is their ratio (goal >= 20). The cursor makes
the API's pages a chain (each request needs the previous answer), so its pace is one request's round trip
through admission, a worker and the site per 50 items, where the HTML crawl keeps ``concurrency`` pages in
flight.
The API's records carry what the endpoint offers of the HTML pages' ten attributes (all but ``ratings`` and
``description``) and its item's ``link``: nine attributes a record against ten. Both run at the bench's
``--concurrency`` (16 by default); the HTML crawl is not always at its best there (on the 2-core bench machine it
was 1.4x faster at 32: docs/benchmarks.md, 2026-12-05), so compare at its best before reading ``api_speedup``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

NOT_A_BENCH = "the API part of bench/crawl.py (a GraphQL source against HTML detail pages)"
PAGE_SIZE = 50
QUERY = ("query Products($first: Int!, $after: String) { products(first: $first, after: $after) "
         "{ edges { node { sku title price stock in_stock released image tags url } } "
         "pageInfo { endCursor hasNextPage } } }")


def write_graphql_source(directory: Path, name: str, site_url: str, concurrency: int) -> Path:
    document = {
        "name": name, "content": "json", "harvesting_lag": 0, "headers": {"X-Demo-Client": name},
        "rate_limit": {"max_active": concurrency, "per_minute": 1_000_000}, "retries": 2, "timeout": 30,
        "input": {"requests": [{"url": f"{site_url}/graphql",
                                "json": {"query": QUERY, "variables": {"first": PAGE_SIZE}}}]},
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


def first_request_tasks(source_path: Path) -> list[Any]:
    """The source's first requests as tasks (what the producer pushes for ``input.requests``)."""
    from harvester.config.loader import load_source_file
    from harvester.distributor import TaskMessage

    source = load_source_file(source_path)
    return [TaskMessage(source=source.name, kind="listing", url=seed.url, request=seed.request)
            for seed in source.input.requests]


def api_figures(api: dict[str, Any], html: dict[str, Any], products: int) -> dict[str, Any]:
    api_rate = api["stored"] / api["seconds"]
    html_rate = html["stored"] / html["seconds"]
    return {"api_items_per_s": round(api_rate, 1), "html_items_per_s": round(html_rate, 1),
            "api_speedup": round(api_rate / html_rate, 2) if html_rate else None,
            "api_requests": api["pages"], "api_records_stored": api["stored"], "html_requests": html["pages"],
            "html_records_stored": html["stored"], "api_products": products,
            "api_cpu_ms_per_item": round(1000 * api["cpu_seconds"] / max(1, api["stored"]), 3),
            "html_cpu_ms_per_item": round(1000 * html["cpu_seconds"] / max(1, html["stored"]), 3)}
