"""`harvester suggest` end to end: on the demo site's detail and listing pages of every shape,
the suggested source validates, `harvester try` on the same URL gives every suggested attribute, and a
harvest through the worker path (intake → admission → batch runner → MongoDB; Celery for the listing
case) stores the same records as the hand-written source, compared on every hand-written field."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from harvester.cli import main
from harvester.config.loader import load_source_file
from harvester.distributor import Intake, RateLimitStore, TaskMessage

from tests.workers.test_batch import run_until_idle

pytestmark = [pytest.mark.integration]
PRODUCTS = (3, 10, 17)  # 10 has no description: an attribute missing on one page of three
PRODUCT = {"type": "Product"}


def ld(path: str) -> dict:
    return {"jsonld": {**PRODUCT, "path": path}}


def md(path: str) -> dict:
    return {"microdata": {**PRODUCT, "path": path}}


def next_data(path: str) -> dict:
    return {"script_json": {"script": "script#__NEXT_DATA__", "path": f"props.pageProps.product.{path}"}}


def nuxt(path: str) -> dict:
    return {"script_json": {"script": "script:contains('__NUXT__')", "path": f"data[0].product.{path}"}}


# (page path, hand-written attributes, content): what a user writes by reading the page
DETAIL_SHAPES: dict[str, tuple[str, dict[str, Any], str]] = {
    "jsonld": ("/ld/product/{n}", {
        "sku": {**ld("sku"), "required": True}, "title": ld("name"), "brand": ld("brand.name"),
        "price": {**ld("offers"), "type": "price"}, "in_stock": {**ld("offers.availability"), "type": "bool"},
        "stock": {**ld("offers.inventoryLevel.value"), "type": "int"},
        "released": {**ld("releaseDate"), "type": "date"},
        "modified": {**ld("dateModified"), "type": "datetime"}, "image": {**ld("image"), "type": "url"}}, "html"),
    "microdata": ("/md/product/{n}", {
        "sku": {**md("sku"), "required": True}, "title": md("name"), "brand": md("brand.name"),
        "price": {**md("offers"), "type": "price"}, "in_stock": {**md("offers.availability"), "type": "bool"},
        "released": {**md("releaseDate"), "type": "date"}, "image": {**md("image"), "type": "url"}}, "html"),
    "opengraph": ("/og/product/{n}", {
        "sku": {"meta": "product:retailer_item_id", "required": True}, "title": {"meta": "og:title"},
        "price": {"meta": "product:price:amount", "type": "price", "currency": "EUR"},
        "in_stock": {"meta": "product:availability", "type": "bool"}, "image": {"meta": "og:image", "type": "url"}},
        "html"),
    "next_data": ("/next/product/{n}", {
        "sku": {**next_data("sku"), "required": True}, "title": next_data("title"),
        "price": {**next_data("price"), "type": "price"}, "stock": {**next_data("stock"), "type": "int"},
        "in_stock": {**next_data("in_stock"), "type": "bool"}, "tags": {**next_data("tags"), "type": "list[str]"}},
        "html"),
    "object_literal": ("/nuxt/product/{n}", {
        "sku": {**nuxt("sku"), "required": True}, "title": nuxt("title"), "price": {**nuxt("price"), "type": "price"},
        "in_stock": {**nuxt("inStock"), "type": "bool"}, "released": {**nuxt("released"), "type": "date"}}, "html"),
    "json_api": ("/api/product/{n}", {
        "sku": {"json": "product.sku", "required": True}, "title": {"json": "product.title"},
        "price": {"json": "product.price", "type": "price"}, "stock": {"json": "product.stock", "type": "int"},
        "tags": {"json": "product.tags", "type": "list[str]"}}, "json"),
    "markup": ("/product/{n}", {
        "sku": {"css": "span.sku::text", "required": True}, "title": {"css": "h1.title::text"},
        "price": {"css": "span.price::text", "type": "price"}, "stock": {"css": "span.stock::text", "type": "int"},
        "in_stock": {"css": "span.in-stock::text", "type": "bool"},
        "released": {"css": "time.released::attr(datetime)", "type": "date"},
        "tags": {"css": "li.tag::text", "type": "list[str]"}}, "html"),
}


def suggest(url: str, name: str, tmp_path: Path, *extra: str) -> dict[str, Any]:
    path = tmp_path / f"{name}.yaml"
    assert main(["suggest", url, "--name", name, "-o", str(path), *extra]) == 0
    text = path.read_text()
    assert text.count("\n  # ") + text.count("\n      # ") >= 3  # choices explained in comment lines
    load_source_file(path)  # it validates
    return yaml.safe_load(text)


def try_record(path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    main(["try", str(path), url, "--json"])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def harvest(document: dict[str, Any], seeds: list[str], kind: str, crawl, settings, mongo_server) -> dict[str, dict]:
    """Write the source where workers read it, push its seeds, run the worker path until idle; records by sku."""
    document = {**document, "input": {"kind": kind, "seeds": seeds}, "retries": 0,
                "rate_limit": {"max_active": 8, "per_minute": 100_000}, "output": document.get("output") or {}}
    if "listing" not in document:
        document["output"] = {"key": ["sku"]}
    (settings.sources_dir / f"{document['name']}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    source = load_source_file(settings.sources_dir / f"{document['name']}.yaml")
    crawl.push(source, *[TaskMessage(source=source.name, kind=kind, url=url) for url in seeds])
    run_until_idle(crawl, source, timeout=60)
    collection = mongo_server.client()[settings.mongo_database][source.output_collection]
    return {record["sku"]: record for record in collection.find({}, {"_id": 0})}


def same_records(hand: dict[str, dict], suggested: dict[str, dict], fields: list[str]) -> None:
    assert hand and set(hand) == set(suggested)
    for sku, record in hand.items():
        for field in fields:
            assert suggested[sku].get(field) == record.get(field), (sku, field, suggested[sku], record)


@pytest.mark.parametrize("shape", sorted(DETAIL_SHAPES))
def test_suggest_on_a_detail_page_harvests_what_the_hand_written_source_does(
        shape, tmp_path, capsys, demo_site, crawl, worker_settings, mongo_server) -> None:
    path, attributes, content = DETAIL_SHAPES[shape]
    urls = [demo_site.url + path.format(n=n) for n in PRODUCTS]
    suggested = suggest(urls[0], f"suggested_{shape}", tmp_path)
    assert suggested.get("content", "html") == content and suggested["render"] == "http"
    missing = set(attributes) - set(suggested["attributes"])
    assert not missing, (missing, suggested["attributes"])
    report = try_record(tmp_path / f"suggested_{shape}.yaml", urls[0], capsys)
    assert report["problems"] == [] and all(report["record"][name] is not None for name in suggested["attributes"])
    hand = harvest({"name": f"hand_{shape}", "content": content, "attributes": attributes}, urls, "details",
                   crawl, worker_settings, mongo_server)
    mine = harvest(suggested, urls, "details", crawl, worker_settings, mongo_server)
    same_records(hand, mine, list(attributes))


def test_suggest_on_listing_pages_of_every_shape(tmp_path, capsys, demo_site, crawl, worker_settings,
                                                 mongo_server) -> None:
    site = demo_site.url
    # a listing whose items carry the fields: records, no detail visit
    catalog = suggest(f"{site}/catalog?per_page=10", "suggested_catalog", tmp_path, "--listing")
    assert "link_selectors" not in catalog["listing"] and catalog["listing"]["records"]["key"] == ["sku"]
    report = try_record(tmp_path / "suggested_catalog.yaml", f"{site}/catalog?per_page=10", capsys)
    assert len(report["records"]) == 10 and report["follow_listings"] == [f"{site}/catalog?page=2&per_page=10"]
    # a JSON API, paginated with a next link
    api = suggest(f"{site}/api/products?per_page=10", "suggested_api", tmp_path, "--listing")
    assert api["content"] == "json" and api["listing"]["next_page_selectors"] == ["json:links.next"]
    # a listing that leads to detail pages
    shop = suggest(f"{site}/shop?per_page=10", "suggested_shop", tmp_path, "--listing")
    assert shop["listing"]["link_selectors"] == ["a.product-link::attr(href)"]
    assert shop["listing"]["follow"].endswith(r"/product/\d+$")

    records = {"sku": {"json": "sku", "required": True}, "title": {"json": "name"},
               "price": {"json": "offers", "type": "price"}, "stock": {"json": "offers.inventoryLevel.value",
                                                                     "type": "int"}}
    hand_catalog = harvest({"name": "hand_catalog", "listing": {"next_page_selectors": ["a.next"], "max_depth": 2,
                                                                "records": {"item": {"jsonld": {
                                                                    "type": "ItemList",
                                                                    "path": "itemListElement[].item"}},
                                                                    "attributes": records, "key": ["sku"]}}},
                           [f"{site}/catalog?per_page=10"], "listing", crawl, worker_settings, mongo_server)
    assert len(hand_catalog) == 30  # three listing pages (max_depth 2) of ten
    catalog["listing"]["max_depth"] = 2
    same_records(hand_catalog, harvest(catalog, [f"{site}/catalog?per_page=10"], "listing", crawl,
                                       worker_settings, mongo_server), ["title", "price", "stock"])
    api_records = {"sku": {"json": "sku", "required": True}, "title": {"json": "title"},
                   "price": {"json": "price", "type": "price"}, "tags": {"json": "tags", "type": "list[str]"}}
    hand_api = harvest({"name": "hand_api", "content": "json", "listing": {
        "next_page_selectors": ["json:links.next"], "max_depth": 2,
        "records": {"item": {"json": "items"}, "attributes": api_records, "key": ["sku"]}}},
        [f"{site}/api/products?per_page=10"], "listing", crawl, worker_settings, mongo_server)
    api["listing"]["max_depth"] = 2
    same_records(hand_api, harvest(api, [f"{site}/api/products?per_page=10"], "listing", crawl, worker_settings,
                                   mongo_server), ["title", "price", "tags"])
    hand_shop = harvest({"name": "hand_shop", "listing": {
        "link_selectors": ["a.more::attr(href)"], "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$",
        "next_page_selectors": ["a.next"], "max_depth": 1},
        "attributes": DETAIL_SHAPES["markup"][1]}, [f"{site}/shop?per_page=10"], "listing", crawl, worker_settings,
        mongo_server)
    assert len(hand_shop) == 20
    shop["listing"]["max_depth"] = 1
    same_records(hand_shop, harvest(shop, [f"{site}/shop?per_page=10"], "listing", crawl, worker_settings,
                                    mongo_server), list(DETAIL_SHAPES["markup"][1]))


@pytest.mark.slow
def test_a_suggested_listing_records_source_harvests_through_celery_with_a_tenth_of_the_requests(
        tmp_path, demo_site, worker_settings, mongo_server, redis_client, celery_worker_factory,
        start_distributor) -> None:
    """The real thing: distributor process, Celery worker, the demo site counting requests per client."""
    suggested = suggest(f"{demo_site.url}/catalog?per_page=50", "suggested_records", tmp_path, "--listing")
    suggested.update(headers={"X-Demo-Client": "suggested_records"},
                     rate_limit={"max_active": 4, "per_minute": 100_000},
                     input={"kind": "listing", "seeds": [f"{demo_site.url}/catalog?per_page=50"]})
    suggested["listing"]["max_depth"] = 20
    (worker_settings.sources_dir / "suggested_records.yaml").write_text(yaml.safe_dump(suggested, sort_keys=False))
    source = load_source_file(worker_settings.sources_dir / "suggested_records.yaml")
    start_distributor()
    celery_worker_factory(queues="default", concurrency=2)
    Intake(redis_client, worker_settings).push(source, [TaskMessage(source=source.name, kind="listing",
                                                                    url=source.input.seeds[0])])
    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    store = RateLimitStore(redis_client, worker_settings)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stats = store.stats([source.name])[source.name]
        if collection.count_documents({}) >= 500 and stats.pending == 0 and stats.active == 0:
            break
        time.sleep(0.5)
    assert collection.count_documents({}) == 500 and len(collection.distinct("sku")) == 500
    assert demo_site.client_stats("suggested_records")["total"] == 10  # 10 listing pages for 500 records
