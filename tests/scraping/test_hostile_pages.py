"""The demo site's hostile pages over real HTTP, through discovery and extraction."""

from __future__ import annotations

import httpx
import pytest
from harvester.scraping.discovery.links import discover_links
from harvester.scraping.extraction.extractor import extract_record, parse_html

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration


def test_non_canonical_links_give_one_url_per_page(demo_site) -> None:
    source = demo_source(demo_site.url, listing={"link_selectors": ["a.product-link"],
                                                 "follow": r"/product/(\w+-?)+/?$|/product/\d+"})
    page_url = f"{demo_site.url}/hostile/links"
    html = httpx.get(page_url, timeout=10).text
    discovery = discover_links(source, page_url, parse_html(html, page_url), depth=0)
    assert discovery.details == [f"{demo_site.url}/product/7", f"{demo_site.url}/product/8?q=caf%E9"]
    assert discovery.ignored == {"repeated_on_page": 7, "not_followed": 1, "too_long": 1}


def test_hostile_values_are_typed_exactly(demo_site) -> None:
    source = demo_source(demo_site.url, attributes={
        "sku": {"css": ".sku", "required": True}, "price": {"css": ".price", "type": "float"},
        "stock": {"css": ".stock", "type": "int"}, "exact": {"css": ".exact", "type": "int"}})
    url = f"{demo_site.url}/hostile/values/3"
    extraction = extract_record(source, parse_html(httpx.get(url, timeout=10).text, url), url)
    record = extraction.record
    assert record is not None and record["price"] == 1234.56 and record["exact"] == 1234567890123456789
    assert record["stock"] is None and [problem.counter for problem in extraction.problems] == ["wrong_type:stock"]


def test_the_nested_page_is_served_at_the_size_asked(demo_site) -> None:
    body = httpx.get(f"{demo_site.url}/hostile/nested?bytes=100000", timeout=10).text
    assert 100_000 <= len(body) < 200_000 and body.count('<span class="v">') == 2000
