"""Sources behind POST through the whole worker path: planned, produced, admitted, fetched, stored, and their
next requests followed, against real Redis, a MongoDB-wire server and the demo's APIs."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from harvester.config import SourceConfig, load_source_file
from harvester.distributor import DeadLetters
from harvester.producer.planner import Planner, PlanOptions
from harvester.producer.producer import Producer
from harvester.storage.packages import PackageStatus

from tests.workers.test_batch import run_until_idle

pytestmark = pytest.mark.integration

QUERY = "query($after: String) { products(first: 50, after: $after) { edges { node { sku title } } } }"


def graphql_document(site: str, name: str = "api_graphql") -> dict[str, Any]:
    return {
        "name": name, "content": "json", "harvesting_lag": 0, "headers": {"X-Demo-Client": name},
        "rate_limit": {"max_active": 4, "per_minute": 100_000},
        "input": {"requests": [{"url": f"{site}/graphql", "json": {"query": QUERY, "variables": {"first": 50}}}]},
        "listing": {
            "max_depth": 20,
            "next": {"cursor": "data.products.pageInfo.endCursor", "into": "variables.after",
                     "while": "data.products.pageInfo.hasNextPage"},
            "records": {"item": "json:data.products.edges[].node",
                        "attributes": {"sku": {"json": "sku", "required": True}, "title": {"json": "title"},
                                       "price": {"json": "price", "type": "price"}},
                        "key": ["sku"]}},
    }


def search_document(site: str, queries: list[str], name: str = "api_search", path: str = "/search",
                    **overrides: Any) -> dict[str, Any]:
    return {
        "name": name, "content": "json", "harvesting_lag": 0, "headers": {"X-Demo-Client": name},
        "rate_limit": {"max_active": 4, "per_minute": 100_000},
        "input": {"requests": [{"url": f"{site}{path}", "json": {"query": query, "hitsPerPage": 20}}
                               for query in queries]},
        "listing": {
            "max_depth": 50, "next": {"page": "page", "into": "page", "while": "page < nbPages"},
            "records": {"item": "json:hits", "attributes": {"sku": {"json": "sku", "required": True},
                                                            "tags": {"json": "tags", "type": "list[str]"}},
                        "key": ["sku"]}},
        **overrides,
    }


def write(settings, document: dict[str, Any]) -> SourceConfig:
    path = settings.sources_dir / f"{document['name']}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_source_file(path)


def plan_and_produce(source: SourceConfig, settings, mongo_server, redis_client, run_id: str) -> Any:
    database = mongo_server.client()[settings.mongo_database]
    Planner(database, database, database).plan(source, run_id, PlanOptions.for_source(source))
    Producer.from_settings(settings, database, redis_client).produce(source, run_id)
    return database


def wait_finished(database, source: str, run_id: str, crawl, config: SourceConfig, timeout: float = 60) -> None:
    run_until_idle(crawl, config, timeout=timeout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        packages = list(database["packages"].find({"source": source, "run_id": run_id}))
        if packages and all(package["status"] == PackageStatus.FINISHED for package in packages):
            return
        time.sleep(0.1)
    raise AssertionError(f"packages of {source} not finished: {packages}")


def test_a_graphql_source_stores_every_item_with_one_post_per_page(worker_settings, demo_site, mongo_server,
                                                                    redis_client, crawl) -> None:
    source = write(worker_settings, graphql_document(demo_site.url))
    database = plan_and_produce(source, worker_settings, mongo_server, redis_client, "run-graphql")
    wait_finished(database, source.name, "run-graphql", crawl, source)
    records = list(database[source.output_collection].find({}, {"_id": 0}))
    assert len(records) == len({record["sku"] for record in records}) == 500
    assert all(record["price"]["currency"] == "EUR" for record in records)
    assert demo_site.api_requests() == {"POST /graphql": 10}  # 50 items a page, never a GET of the endpoint
    (package,) = database["packages"].find({"source": source.name, "run_id": "run-graphql"})
    assert len(package["done"]) == 10 and package["failed"] == []


def test_two_bodies_to_one_url_both_run_and_each_page_is_asked_once(worker_settings, demo_site, mongo_server,
                                                                     redis_client, crawl) -> None:
    source = write(worker_settings, search_document(demo_site.url, ["garden", "kitchen"]))
    keys = [seed.key for seed in source.input.requests]
    assert len(set(keys)) == 2 and {key.split("#")[0] for key in keys} == {f"{demo_site.url}/search"}
    database = plan_and_produce(source, worker_settings, mongo_server, redis_client, "run-search")
    wait_finished(database, source.name, "run-search", crawl, source)
    records = list(database[source.output_collection].find({}, {"_id": 0}))
    tagged = {tag: {record["sku"] for record in records if tag in record["tags"]} for tag in ("garden", "kitchen")}
    assert tagged["garden"] and tagged["kitchen"] and tagged["garden"] != tagged["kitchen"]
    pages = sum(-(-len(skus) // 20) for skus in tagged.values())
    assert demo_site.api_requests() == {"POST /search": pages}  # both queries, every page once


def test_a_429_with_retry_after_on_a_post_is_waited_for_then_the_page_is_stored(worker_settings, demo_site,
                                                                                mongo_server, redis_client,
                                                                                crawl) -> None:
    document = search_document(demo_site.url, ["garden"], name="api_busy", path="/search-busy/worker",
                               listing={"max_depth": 0, "records": search_document(demo_site.url, [])["listing"]
                                        ["records"]})
    source = write(worker_settings, document)
    database = plan_and_produce(source, worker_settings, mongo_server, redis_client, "run-busy")
    first = crawl.step(source)
    assert first is not None and first["outcomes"].get("http_429") == 1
    started = time.monotonic()
    assert crawl.step(source) is None  # the source waits out Retry-After (1 s) before the POST goes again
    wait_finished(database, source.name, "run-busy", crawl, source)
    assert time.monotonic() - started >= 0.9
    assert database[source.output_collection].count_documents({}) == 20
    assert demo_site.api_requests() == {"POST /search-busy/worker": 2}
    assert DeadLetters(redis_client).list(source.name) == []


def test_suggest_on_a_graphql_endpoint_and_a_sample_body_gives_a_source_that_harvests_every_item(
        worker_settings, demo_site, mongo_server, redis_client, crawl, tmp_path, capsys) -> None:
    from harvester.cli import main

    body = {"query": "{ products(first: 50, after: $after) { edges { node { sku title price } } "
                     "pageInfo { endCursor hasNextPage } } }", "variables": {"first": 50}}
    path = worker_settings.sources_dir / "suggested_graphql.yaml"
    assert main(["suggest", f"{demo_site.url}/graphql", "--name", "suggested_graphql", "--post-json",
                 json.dumps(body), "-o", str(path)]) == 0
    source = load_source_file(path)
    assert source.listing is not None and source.listing.next is not None
    assert (source.listing.next.cursor, source.listing.next.into) == ("data.products.pageInfo.endCursor",
                                                                      "variables.after")
    assert source.listing.records is not None and source.listing.records.key == ["sku"]
    assert main(["try", str(path), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["records"]) == 50
    demo_site.reset()
    database = plan_and_produce(source, worker_settings, mongo_server, redis_client, "run-suggested")
    wait_finished(database, source.name, "run-suggested", crawl, source)
    assert len(database[source.output_collection].distinct("sku")) == 500
    assert demo_site.api_requests() == {"POST /graphql": 10}
    assert main(["suggest", f"{demo_site.url}/graphql", "--post-json", "{nope"]) == 2


def test_detail_tasks_are_built_from_the_items_of_a_post_listing(worker_settings, demo_site, mongo_server,
                                                                  redis_client, crawl) -> None:
    document = graphql_document(demo_site.url, "api_details")
    document["input"]["requests"][0]["json"]["variables"] = {"first": 20, "tag": "garden"}
    document["listing"] = {"max_depth": 0, "link_selectors": ["json:data.products.edges[].node.api_url"],
                           "follow": "/api/product/"}
    document["attributes"] = {"sku": {"json": "product.sku", "required": True}, "title": {"json": "product.title"}}
    document["output"] = {"key": ["sku"]}
    source = write(worker_settings, document)
    database = plan_and_produce(source, worker_settings, mongo_server, redis_client, "run-details")
    wait_finished(database, source.name, "run-details", crawl, source)
    records = list(database[source.output_collection].find({}, {"_id": 0}))
    assert len(records) == 20 and all(record["url"].startswith(f"{demo_site.url}/api/product/") for record in records)
    paths = demo_site.requests_of("api_details")["paths"]
    assert demo_site.api_requests() == {"POST /graphql": 1}
    assert sum(count for path, count in paths.items() if path.startswith("/api/product/")) == 20
