"""Requests with a method and a body against the demo's APIs: what is sent, what a redirect makes of it, and the
same politeness and safety as a GET (robots.txt, the address rules, Retry-After, connection secrets)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from harvester.config import HttpRequest, SourceConfig, request_key
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult
from harvester.scraping.page import process_page
from harvester.settings import HarvesterSettings

pytestmark = pytest.mark.integration

QUERY = "query($after: String) { products(first: 50, after: $after) { edges { node { sku } } } }"


def api_source(site: str, **overrides: Any) -> SourceConfig:
    document: dict[str, Any] = {
        "name": "demo_graphql", "content": "json", "robots": "obey",
        "input": {"requests": [{"url": f"{site}/graphql", "json": {"query": QUERY, "variables": {"first": 50}}}]},
        "listing": {
            "max_depth": 20,
            "next": {"cursor": "data.products.pageInfo.endCursor", "into": "variables.after",
                     "while": "data.products.pageInfo.hasNextPage"},
            "records": {"item": "json:data.products.edges[].node",
                        "attributes": {"sku": {"json": "sku", "required": True}, "title": {"json": "title"}},
                        "key": ["sku"]}},
    }
    document.update(overrides)
    return SourceConfig.model_validate(document)


def fetch(url: str, source: SourceConfig, request: HttpRequest | None, **settings: Any) -> FetchResult:
    async def run() -> FetchResult:
        async with Fetcher(HarvesterSettings(**settings)) as fetcher:
            return await fetcher.fetch(url, source, request=request)

    return asyncio.run(run())


def json_request(body: dict[str, Any], **fields: Any) -> HttpRequest:
    return HttpRequest.model_validate({"json": body, **fields})


def follow_chain(source: SourceConfig, url: str, request: HttpRequest | None) -> tuple[list[str], list[str]]:
    """One cursor chain followed to its end as a worker does (fetch, read, the next request): its skus and the keys
    of its pages."""
    depth, skus, keys = 0, [], []
    while True:
        result = fetch(url, source, request)
        assert result.ok, result.reason
        page = process_page(source, "listing", url, depth, result, request=request)
        skus += [record["sku"] for record in page.records]
        keys.append(page.url)
        if not page.discovery.listings:
            return skus, keys
        (key,) = page.discovery.listings
        url, request = page.discovery.listing_request(key)
        assert request is not None and key == request_key(url, request) and request.value_at("variables.after")
        depth += 1


def test_a_graphql_source_reads_every_item_with_one_post_per_page(demo_site) -> None:
    source = api_source(demo_site.url)
    seed = source.input.requests[0]
    skus, keys = follow_chain(source, seed.url, seed.request)
    assert len(skus) == len(set(skus)) == 500 and len(keys) == len(set(keys)) == 10
    assert demo_site.api_requests() == {"POST /graphql": 10}  # one POST a page, and never a GET


def segment_request(segment: Any, total: Any) -> HttpRequest:
    return json_request({"query": QUERY, "variables": {"first": 50, "segment": segment, "totalSegments": total}})


def test_the_segments_of_the_graphql_endpoint_give_every_item_exactly_once_each_its_own_cursor_chain(
        demo_site) -> None:
    source, url = api_source(demo_site.url), f"{demo_site.url}/graphql"
    chains = [follow_chain(source, url, segment_request(segment, 3)) for segment in range(3)]
    every = [sku for skus, _ in chains for sku in skus]
    assert len(every) == len(set(every)) == 500  # the three partitions together: each item once
    assert all(int(sku.removeprefix("SKU-")) % 3 == segment for segment, (skus, _) in enumerate(chains)
               for sku in skus)
    assert [len(keys) for _, keys in chains] == [4, 4, 4]  # 167, 167 and 166 items: 4 pages each
    keys = [key for _, chain_keys in chains for key in chain_keys]
    assert len(keys) == len(set(keys))  # two segments' pages are two requests, never one de-duplicated
    assert demo_site.api_requests() == {"POST /graphql": 12}


@pytest.mark.parametrize(("segment", "total"), [(3, 3), (-1, 2), (0, 0), ("0", 2), (0, None), (None, 2), (True, 2)])
def test_an_invalid_segment_is_answered_with_graphql_errors(demo_site, segment: Any, total: Any) -> None:
    import httpx

    body = {"query": QUERY, "variables": {"first": 50, "segment": segment, "totalSegments": total}}
    response = httpx.post(f"{demo_site.url}/graphql", json=body)
    assert response.status_code == 400 and "segment" in response.json()["errors"][0]["message"]


def test_max_depth_bounds_the_pages_a_cursor_leads_to(demo_site) -> None:
    source = api_source(demo_site.url, listing={**api_source(demo_site.url).listing.model_dump(by_alias=True),
                                                "max_depth": 1})
    seed = source.input.requests[0]
    first = process_page(source, "listing", seed.url, 0, fetch(seed.url, source, seed.request), request=seed.request)
    assert len(first.discovery.listings) == 1
    url, request = first.discovery.listing_request(first.discovery.listings[0])
    second = process_page(source, "listing", url, 1, fetch(url, source, request), request=request)
    assert second.discovery.listings == [] and second.discovery.ignored == {"beyond_max_depth": 1}


def test_two_bodies_to_one_url_get_their_own_answers(demo_site) -> None:
    source = api_source(demo_site.url)
    garden = json_request({"query": "garden", "hitsPerPage": 5})
    kitchen = json_request({"query": "kitchen", "hitsPerPage": 5})
    answers = [json.loads(fetch(f"{demo_site.url}/search", source, request).text) for request in (garden, kitchen)]
    assert [answer["query"] for answer in answers] == ["garden", "kitchen"]
    assert answers[0]["hits"] != answers[1]["hits"]
    assert request_key(f"{demo_site.url}/search", garden) != request_key(f"{demo_site.url}/search", kitchen)


def test_a_form_body_is_sent_as_a_form(demo_site) -> None:
    source = api_source(demo_site.url)
    request = HttpRequest.model_validate({"form": {"query": "garden", "page": 2, "hitsPerPage": 5}})
    answer = json.loads(fetch(f"{demo_site.url}/search", source, request).text)
    assert (answer["query"], answer["page"], len(answer["hits"])) == ("garden", 2, 5)


def test_search_pages_follow_page_plus_one_while_page_is_below_nb_pages(demo_site) -> None:
    source = api_source(demo_site.url, listing={
        "max_depth": 50, "next": {"page": "page", "into": "page", "while": "page < nbPages"},
        "records": {"item": "json:hits", "attributes": {"sku": {"json": "sku", "required": True}}, "key": ["sku"]}})
    url, request = f"{demo_site.url}/search", json_request({"query": "garden", "hitsPerPage": 20})
    skus, depth = [], 0
    while True:
        page = process_page(source, "listing", url, depth, fetch(url, source, request), request=request)
        skus += [record["sku"] for record in page.records]
        if not page.discovery.listings:
            break
        url, request = page.discovery.listing_request(page.discovery.listings[0])
        depth += 1
    expected = json.loads(fetch(url, source, json_request({"query": "garden", "hitsPerPage": 1})).text)["nbHits"]
    assert len(skus) == len(set(skus)) == expected > 20
    assert demo_site.api_requests()["POST /search"] == -(-expected // 20) + 1  # the pages, and the count above


@pytest.mark.parametrize("status", [307, 308])
def test_a_307_or_308_keeps_the_method_and_the_body(demo_site, status) -> None:
    result = fetch(f"{demo_site.url}/graphql-moved/{status}", api_source(demo_site.url),
                   json_request({"query": QUERY, "variables": {"first": 3}}))
    assert result.ok and len(json.loads(result.text)["data"]["products"]["edges"]) == 3
    assert demo_site.api_requests() == {f"POST /graphql-moved/{status}": 1, "POST /graphql": 1}


@pytest.mark.parametrize("status", [301, 302, 303])
def test_any_other_redirect_of_a_post_becomes_a_get_without_the_body(demo_site, status) -> None:
    result = fetch(f"{demo_site.url}/graphql-moved/{status}", api_source(demo_site.url),
                   json_request({"query": QUERY}))
    assert (result.outcome, result.status) == ("http_error", 405)  # the endpoint takes POST only
    assert demo_site.api_requests() == {f"POST /graphql-moved/{status}": 1, "GET /graphql": 1}


def test_a_429_with_retry_after_on_a_post_is_a_rate_limit(demo_site) -> None:
    source = api_source(demo_site.url)
    request = json_request({"query": "garden"})
    first = fetch(f"{demo_site.url}/search-busy/post", source, request)
    assert (first.status, first.retry_after, first.retryable) == (429, 1.0, True)
    assert fetch(f"{demo_site.url}/search-busy/post", source, request).ok


def test_robots_txt_holds_for_the_endpoints_path(demo_site) -> None:
    result = fetch(f"{demo_site.url}/private/graphql", api_source(demo_site.url), json_request({"query": QUERY}))
    assert result.outcome == "robots_disallowed"
    assert demo_site.api_requests() == {} and demo_site.requests_of("127.0.0.1")["paths"].get("/private/graphql") \
        is None


def test_the_address_rules_hold_for_a_post(demo_site) -> None:
    result = fetch(f"{demo_site.url}/graphql", api_source(demo_site.url), json_request({"query": QUERY}),
                   allowed_private_networks="")
    assert result.outcome == "refused" and "loopback" in result.reason
    assert demo_site.api_requests() == {}


def test_connection_secrets_are_filled_in_at_send_time_only(demo_site, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DEMO_SEARCH", json.dumps({"conn_type": "http", "login": "crawler",
                                                               "password": "p-987"}))
    request = json_request({"query": "${connection.password}", "hitsPerPage": 1})
    source = api_source(demo_site.url, http_connection_id="demo_search")
    result = fetch(f"{demo_site.url}/search", source, request)
    assert json.loads(result.text)["query"] == "p-987"  # the site got the secret
    assert "p-987" not in request_key(f"{demo_site.url}/search", request) and "p-987" not in request.model_dump_json()


def test_a_body_naming_a_connection_the_source_lacks_is_never_sent(demo_site) -> None:
    result = fetch(f"{demo_site.url}/search", api_source(demo_site.url),
                   json_request({"query": "${connection.password}"}))
    assert result.outcome == "refused" and "http_connection_id" in result.reason and not result.retryable
    assert demo_site.api_requests() == {}


def test_secrets_never_follow_a_redirect_to_another_origin(demo_site, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DEMO_SEARCH", json.dumps({"conn_type": "http", "login": "crawler",
                                                               "password": "p-987"}))
    source = api_source(demo_site.url, http_connection_id="demo_search")
    other_origin = demo_site.url.replace("127.0.0.1", "localhost")
    result = fetch(f"{demo_site.url}/graphql-moved/307?to={other_origin}/search", source,
                   json_request({"query": "${connection.password}"}))
    assert result.outcome == "refused" and "not bound" in result.reason, result.reason
    assert demo_site.api_requests() == {"POST /graphql-moved/307": 1}  # the secret went to its own origin only


# -- harvester try --------------------------------------------------------------------------------------
def write_source(tmp_path, site: str) -> str:
    import yaml

    path = tmp_path / "demo_graphql.yaml"
    path.write_text(yaml.safe_dump(api_source(site).model_dump(mode="json", exclude_defaults=True, by_alias=True)))
    return str(path)


def test_harvester_try_sends_the_first_request_and_shows_records_and_the_next_request(demo_site, tmp_path,
                                                                                      capsys) -> None:
    from harvester.cli import main

    assert main(["try", write_source(tmp_path, demo_site.url), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "listing" and report["request"].startswith('POST {"query":')
    assert len(report["records"]) == 50 and report["records"][0]["sku"] == "SKU-00001"
    (following,) = report["follow_listings"]
    assert following.startswith(f"{demo_site.url}/graphql  POST ") and '"after":"' in following
    assert demo_site.api_requests() == {"POST /graphql": 1}
    assert main(["try", write_source(tmp_path, demo_site.url)]) == 0
    assert "request: POST {" in capsys.readouterr().out


def test_harvester_try_with_another_body(demo_site, tmp_path, capsys) -> None:
    from harvester.cli import main

    body = json.dumps({"query": QUERY, "variables": {"first": 2, "tag": "garden"}})
    assert main(["try", write_source(tmp_path, demo_site.url), f"{demo_site.url}/graphql", "--post-json", body,
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["records"]) == 2 and '"tag":"garden"' in report["request"]
    assert main(["try", write_source(tmp_path, demo_site.url), "--post-json", "{not json"]) == 2
    assert "--post-json" in capsys.readouterr().err
