"""``url_key: canonical_link``: a detail record is stored under the page's ``<link rel=canonical>`` (same site
only), so one item reached by several URLs (filters, referrers, session ids the defaults do not know) is one
record."""

from __future__ import annotations

import pytest
from harvester.config import SourceConfig
from harvester.scraping.fetching import FetchResult
from harvester.scraping.page import process_page

pytestmark = pytest.mark.unit
REQUESTED = "http://shop.example/item/7?color=red&ref=newsletter"


def source(**overrides: object) -> SourceConfig:
    return SourceConfig.model_validate({"name": "shop", "input": {"seeds": ["http://shop.example/"]},
                                        "attributes": {"title": "h1::text"}, **overrides})


def stored_url(source: SourceConfig, canonical_link: str) -> str:
    html = f'<html><head><link rel="canonical" href="{canonical_link}"></head><body><h1>Seven</h1></body></html>'
    fetch = FetchResult(REQUESTED, "ok", final_url=REQUESTED, status=200, text=html, size=len(html))
    result = process_page(source, "detail", REQUESTED, 0, fetch)
    assert result.records and result.records[0]["title"] == "Seven"
    return result.records[0]["url"]


def test_a_source_keyed_by_the_canonical_link_stores_under_it() -> None:
    assert stored_url(source(url_key="canonical_link"), "/item/7") == "http://shop.example/item/7"
    assert stored_url(source(url_key="canonical_link"), "https://www.shop.example/item/7;jsessionid="
                      "0A1B2C3D4E5F6A7B8C9D") == "https://www.shop.example/item/7"


def test_another_sites_canonical_link_is_not_trusted() -> None:
    assert stored_url(source(url_key="canonical_link"), "https://elsewhere.example/item/7") == (
        "http://shop.example/item/7?color=red&ref=newsletter")


def test_by_default_the_requested_url_is_the_key() -> None:
    assert stored_url(source(), "/item/7") == "http://shop.example/item/7?color=red&ref=newsletter"
