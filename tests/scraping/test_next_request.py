"""``listing.next``: the next request built from a response, without any server (the page is given as text)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harvester.config import HttpRequest, SourceConfig, request_key
from harvester.scraping.discovery.links import Discovery
from harvester.scraping.discovery.next_request import add_next_request
from harvester.scraping.extraction import PageData
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.scraping.page import process_page

pytestmark = pytest.mark.unit
API = "https://api.example.com/items"


def source(next_rule: dict[str, Any], max_depth: int = 5) -> SourceConfig:
    return SourceConfig.model_validate({
        "name": "api", "content": "json", "input": {"seeds": [f"{API}?page=1"]},
        "listing": {"max_depth": max_depth, "next": next_rule, "records": {
            "item": "json:items", "attributes": {"sku": {"json": "sku", "required": True}}, "key": ["sku"]}}})


def next_of(config: SourceConfig, document: Any, url: str = API, request: HttpRequest | None = None,
            depth: int = 0) -> Discovery:
    discovery = Discovery()
    add_next_request(config, url, request, PageData(json.dumps(document), url, "json"), depth, discovery)
    return discovery


def test_a_get_api_pages_by_a_query_parameter() -> None:
    config = source({"page": "page", "into": "page", "while": "page < pages"})
    found = next_of(config, {"items": [{"sku": "a"}], "page": 1, "pages": 3}, f"{API}?page=1&size=10")
    assert found.listings == [f"{API}?page=2&size=10"] and found.listing_request(found.listings[0]) == (
        f"{API}?page=2&size=10", None)
    assert next_of(config, {"items": [{"sku": "a"}], "page": 3, "pages": 3}, f"{API}?page=3").listings == []


def test_an_offset_steps_from_what_the_request_sent() -> None:
    config = source({"offset": 25, "into": "query.from"})
    request = HttpRequest.model_validate({"json": {"query": {"from": 50, "size": 25}}})
    found = next_of(config, {"items": [{"sku": "a"}]}, request=request)
    (key,) = found.listings
    url, following = found.listing_request(key)
    assert url == API and following is not None and following.value_at("query.from") == 75
    assert following.value_at("query.size") == 25 and request.value_at("query.from") == 50  # the original stays
    assert key == request_key(API, following)


def test_a_form_body_gets_the_value_in_its_field() -> None:
    config = source({"page": "page", "into": "page"})
    request = HttpRequest.model_validate({"form": {"q": "x", "page": 1}})
    (key,) = next_of(config, {"items": [{"sku": "a"}], "page": 1}, request=request).listings
    _, following = next_of(config, {"items": [{"sku": "a"}], "page": 1}, request=request).listing_request(key)
    assert following is not None and following.form == {"q": "x", "page": 2}


def test_a_missing_cursor_or_a_false_while_is_the_last_page() -> None:
    config = source({"cursor": "next", "into": "after", "while": "more"})
    request = HttpRequest.model_validate({"json": {"after": None}})
    assert next_of(config, {"items": [], "next": "c1", "more": False}, request=request).listings == []
    assert next_of(config, {"items": [], "next": None, "more": True}, request=request).listings == []
    assert next_of(config, {"items": [], "next": "", "more": True}, request=request).listings == []
    assert len(next_of(config, {"items": [], "next": "c1", "more": True}, request=request).listings) == 1


def test_a_cursor_that_does_not_move_is_not_followed() -> None:
    config = source({"cursor": "next", "into": "after"})
    request = HttpRequest.model_validate({"json": {"after": "c1"}})
    found = next_of(config, {"next": "c1"}, request=request)
    assert found.listings == [] and found.ignored == {"repeated_on_page": 1}


def test_max_depth_cuts_and_counts() -> None:
    found = next_of(source({"page": "page", "into": "page"}, max_depth=2), {"page": 3}, f"{API}?page=3", depth=2)
    assert found.listings == [] and found.ignored == {"beyond_max_depth": 1}


def test_a_page_without_records_ends_the_walk() -> None:
    config = source({"page": "page", "into": "page"})
    request = HttpRequest.model_validate({"json": {"page": 4}})

    def page(items: list[dict[str, str]]) -> Any:
        fetch = FetchResult(API, "ok", final_url=API, status=200, content_type="application/json",
                            text=json.dumps({"items": items, "page": 4}))
        return process_page(config, "listing", API, 0, fetch, request=request)

    assert page([]).discovery.listings == []
    assert len(page([{"sku": "a"}]).discovery.listings) == 1
    assert page([{"sku": "a"}]).url == request_key(API, request)  # the page is known by its key


def test_a_json_page_without_link_selectors_is_read_without_a_parsel_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its records and its next request come from the parsed JSON alone: looking for links with no selector
    built a parsel Selector of the body (parsing the JSON a second time) on every page of a chain."""
    from harvester.scraping.extraction import structured

    def no_document(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a parsel document was built for a JSON page with no link selectors")

    monkeypatch.setattr(structured, "Selector", no_document)
    config = source({"page": "page", "into": "page"})
    request = HttpRequest.model_validate({"json": {"page": 1}})
    fetch = FetchResult(API, "ok", final_url=API, status=200, content_type="application/json",
                        text=json.dumps({"items": [{"sku": "a"}, {"sku": "b"}], "page": 1}))

    page = process_page(config, "listing", API, 0, fetch, request=request)

    assert fetch.outcome == "ok", fetch.reason
    assert [record["sku"] for record in page.listing_records.records] == ["a", "b"]
    assert len(page.discovery.listings) == 1
