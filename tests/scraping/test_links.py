"""URL canonicalisation and link discovery: one small test per rule."""

from __future__ import annotations

import pytest
from harvester.scraping.extraction import parse_html
from harvester.scraping.links import canonicalise_url, discover_links

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit
BASE = "http://127.0.0.1:9/shop?page=1"


@pytest.mark.parametrize(("raw", "expected"), [
    ("HTTP://Example.COM/a?b=2&a=1#frag", "http://example.com/a?a=1&b=2"),
    ("https://example.com:443/x", "https://example.com/x"),
    ("http://example.com:8080", "http://example.com:8080/"),
    ("/product/3?utm_source=x&utm_medium=y&gclid=z&id=4", "http://127.0.0.1:9/product/3?id=4"),
    ("../product/3", "http://127.0.0.1:9/product/3"),
    ("?page=2", "http://127.0.0.1:9/shop?page=2"),
    ("  /p  ", "http://127.0.0.1:9/p"),
])
def test_canonical_form(raw: str, expected: str) -> None:
    assert canonicalise_url(raw, BASE) == expected


@pytest.mark.parametrize("raw", ["javascript:void(0)", "mailto:a@b.c", "file:///etc/passwd", "ftp://x.org/y",
                                 "", "data:text/html,hi", "http://[bad"])
def test_non_http_links_are_ignored(raw: str) -> None:
    assert canonicalise_url(raw, BASE) is None


def test_canonical_form_is_idempotent() -> None:
    once = canonicalise_url("HTTP://A.example/x?z=1&utm_campaign=q&a=2#top")
    assert once is not None
    assert canonicalise_url(once) == once


def _listing(links: str) -> str:
    return f"<html><body>{links}<a class='next' href='/shop?page=2'>next</a></body></html>"


def test_discovery_follows_pattern_dedupes_and_respects_depth() -> None:
    source = demo_source("http://127.0.0.1:9")
    html = _listing(
        "<a class='product-link' href='/product/1?utm_source=a#r'>1</a><a class='more' href='/product/1'>1</a>"
        "<a class='product-link' href='javascript:void(0)'>js</a><a class='product-link' href='mailto:x@y.z'>m</a>"
        "<a class='product-link' href='file:///etc/passwd'>f</a>"
        "<a class='product-link' href='https://elsewhere.example.org/product/2'>x</a>"
        "<a class='product-link' href='/product/2'>2</a>"
    )
    discovery = discover_links(source, BASE, parse_html(html, BASE), depth=0)
    assert discovery.details == ["http://127.0.0.1:9/product/1", "http://127.0.0.1:9/product/2"]
    assert discovery.listings == ["http://127.0.0.1:9/shop?page=2"]
    assert discovery.ignored == {"not_http": 3, "not_followed": 1, "repeated_on_page": 1}
    at_limit = discover_links(source, BASE, parse_html(html, BASE), depth=source.listing.max_depth)
    assert at_limit.listings == [] and at_limit.ignored["beyond_max_depth"] == 1


def test_xpath_link_selectors_and_attribute_results() -> None:
    source = demo_source("http://127.0.0.1:9", listing={
        "link_selectors": ["xpath://a[@class='p']/@href", "a.q::attr(data-href)"], "follow": "/product/"})
    html = "<a class='p' href='/product/7'>7</a><a class='q' data-href='/product/8'>8</a>"
    discovery = discover_links(source, BASE, parse_html(html, BASE), depth=0)
    assert discovery.details == ["http://127.0.0.1:9/product/7", "http://127.0.0.1:9/product/8"]
