"""URL canonicalisation and link discovery: one small test per rule."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest
from harvester.scraping.discovery.links import canonicalise_url, discover_links
from harvester.scraping.extraction.extractor import parse_html

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


# -- w3lib's canonical form (a hand-written canonicaliser gave one page two keys) ---------------------
# Vectors from w3lib's own tests/test_url.py (CanonicalizeUrlTest) and canonicalize_url's docstring.
W3LIB_VECTORS = [
    ("http://www.example.com", "http://www.example.com/"),
    ("http://www.example.com/do?c=1&b=2&a=3", "http://www.example.com/do?a=3&b=2&c=1"),
    ("http://www.example.com/do?&a=1", "http://www.example.com/do?a=1"),
    ("http://www.example.com:8888/do?a=1&b=2&c=3", "http://www.example.com:8888/do?a=1&b=2&c=3"),
    ("http://www.example.com:/do?a=1&b=2&c=3", "http://www.example.com/do?a=1&b=2&c=3"),
    ("http://www.example.com/do?c=3&b=5&b=2&a=50", "http://www.example.com/do?a=50&b=2&b=5&c=3"),
    ("http://www.example.com/do?b=&c&a=2", "http://www.example.com/do?a=2&b=&c="),
    ("http://www.example.com/do?1750,4", "http://www.example.com/do?1750%2C4="),
    ("http://www.example.com/do?q=a space&a=1", "http://www.example.com/do?a=1&q=a+space"),
    ("http://www.example.com/do?q=a%20space&a=1", "http://www.example.com/do?a=1&q=a+space"),
    ("http://www.example.com/résumé?q=résumé", "http://www.example.com/r%C3%A9sum%C3%A9?q=r%C3%A9sum%C3%A9"),
    ("http://www.example.com/r%c3%a9sum%c3%a9", "http://www.example.com/r%C3%A9sum%C3%A9"),  # escape case
    ("http://www.example.com/a%a3do", "http://www.example.com/a%A3do"),
    ("http://www.example.com/a%a3do?q=r%e9sum%e9", "http://www.example.com/a%A3do?q=r%E9sum%E9"),
    ("http://www.example.com/do?k=b%a3", "http://www.example.com/do?k=b%A3"),
    ("http://www.example.com/a %20do?a=1", "http://www.example.com/a%20%20do?a=1"),
    ("http://www.example.com/do?price=£500&a=5&z=3", "http://www.example.com/do?a=5&price=%C2%A3500&z=3"),
    ("http://www.example.com/caf%E9-con-leche.htm", "http://www.example.com/caf%E9-con-leche.htm"),
    ("http://www.EXAMPLE.com/", "http://www.example.com/"),
    ("http://www.bücher.de?q=bücher", "http://www.xn--bcher-kva.de/?q=b%C3%BCcher"),  # IDNA host
    ("http://はじめよう.みんな/?query=サ&maxResults=5",
     "http://xn--p8j9a0d9c9a.xn--q9jyb4c/?maxResults=5&query=%E3%82%B5"),
    ("http://foo.com/AC%2FDC+rocks%3f/?yeah=1", "http://foo.com/AC%2FDC+rocks%3F/?yeah=1"),
    ("http://www.simplybedrooms.com/White-Bedroom-Furniture/Bedroom-Mirror:-Josephine-Cheval-Mirror.html",
     "http://www.simplybedrooms.com/White-Bedroom-Furniture/Bedroom-Mirror:-Josephine-Cheval-Mirror.html"),
    ("http://[::0:1]/a/../b", "http://[::1]/b"),  # IPv6 form and dot segments
    ("http://www.example.com/a/./b/../c/", "http://www.example.com/a/c/"),
]


@pytest.mark.parametrize(("raw", "expected"), W3LIB_VECTORS)
def test_w3lib_vectors(raw: str, expected: str) -> None:
    assert canonicalise_url(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), [
    ("http://www.example.com/do?q=caf%E9", "http://www.example.com/do?q=caf%E9"),  # not rewritten to U+FFFD
    ("http://user:pass@www.example.com:81/do?now=1", "http://www.example.com:81/do?now=1"),  # userinfo dropped
    ("https://user@www.example.com/", "https://www.example.com/"),
    ("http://www.example.com:80/x#frag", "http://www.example.com/x"),
    ("http://[::1]:80/", "http://[::1]/"),
    ("http://www.example.com./x", "http://www.example.com/x"),
    ("http://shop.example/p?fbclid=1&gclid=2&utm_campaign=x&UTM_Source=y&id=7", "http://shop.example/p?id=7"),
    ("http://shop.example/p?utm_source=only", "http://shop.example/p"),
])
def test_harvester_rules_on_top_of_w3lib(raw: str, expected: str) -> None:
    assert canonicalise_url(raw) == expected


def test_the_planner_checker_and_records_share_the_one_function() -> None:
    from harvester import urls
    from harvester.producer import planner
    from harvester.scraping import page
    from harvester.scraping.discovery import links
    from harvester.scraping.extraction import coercion  # coercion types url attributes
    from harvester.storage import url_store

    for module in (links, coercion, page, planner, url_store):
        assert module.canonicalise_url is urls.canonicalise_url, module.__name__


def test_a_link_over_the_length_cap_is_ignored_before_matching() -> None:
    source = demo_source("http://127.0.0.1:9")
    long_link = "/product/" + "a" * 5000
    discovery = discover_links(source, BASE, parse_html(f"<a class='product-link' href='{long_link}'>x</a>", BASE),
                               depth=0, max_url_length=2048)
    assert discovery.details == [] and discovery.ignored == {"too_long": 1}


def test_the_backtracking_follow_pattern_runs_fast_in_discovery() -> None:
    import time

    source = demo_source("http://127.0.0.1:9", listing={"link_selectors": ["a"], "follow": r"/product/(\w+-?)+/$"})
    links_html = "".join(f"<a href='/product/{'a' * 26}!{index}'>x</a>" for index in range(50))
    started = time.perf_counter()
    discovery = discover_links(source, BASE, parse_html(links_html + "<a href='/product/red-hat/'>h</a>", BASE), 0)
    assert time.perf_counter() - started < 5  # one such link took 21 s
    assert discovery.details == ["http://127.0.0.1:9/product/red-hat/"]
    assert discovery.ignored == {"not_followed": 50}


def test_the_fast_path_for_canonical_urls_agrees_with_w3lib() -> None:
    """URLs that look canonical skip w3lib; on random URLs both paths must give the same answer."""
    import random

    from harvester.urls import _ALREADY_CANONICAL, _canonicalise

    generator = random.Random(12)
    pieces = ["a", "Z", "0", "9", "-", "_", ".", "..", "~", "/", "//", "%7e", "%41", "é", ":", "@", "?", "#", "&",
              "=", "+", " ", "!", "xn--bcher-kva"]
    hosts = ["example.com", "EXAMPLE.com", "127.0.0.1", "a-b.example", "example.com.", "a..b", "xn--bcher-kva.de",
             "[::1]", "example.com:80", "example.com:8080", "example.com:443", "example.com:08080", "example.com:99999"]
    fast = 0
    for _ in range(4000):
        path = "".join(generator.choice(pieces) for _ in range(generator.randint(0, 8)))
        url = f"{generator.choice(['http', 'https', 'HTTP'])}://{generator.choice(hosts)}{'/' if path else ''}{path}"
        assert canonicalise_url(url) == _canonicalise(url, None), url
        fast += bool(_ALREADY_CANONICAL.fullmatch(url))
    assert fast > 300  # the fast path was really exercised
    for url in ["http://127.0.0.1:8008/product/12", "https://shop.example/a/b-c_d~e.html", "http://x.org",
                "http://x.org/a/", "http://x.org/.well-known/a", "http://x.org/a..b/.c"]:
        assert canonicalise_url(url) == _canonicalise(url, None), url


def test_relative_links_take_the_fast_path_and_agree_with_w3lib() -> None:
    """A link is joined to its page first, so "/product/12" skips w3lib; on random relative links against
    random bases, the answer is the one of the slow path (urljoin, then w3lib and Harvester's rules)."""
    import random

    from harvester.urls import _ALREADY_CANONICAL, _canonicalise

    generator = random.Random(21)
    pieces = ["a", "Z", "0", "-", "_", ".", "..", "~", "/", "//", "%41", "é", ":", "@", "?", "#", "&", "=", " ",
              "http://x.org", "mailto:a", "javascript:"]
    bases = ["http://127.0.0.1:8008/shop?per_page=100", "https://shop.example/a/b/", "http://EXAMPLE.com:80/a",
             "http://x.org", "https://x.org:8443/a/b?c=d#e", "http://[::1]:8008/a"]
    fast = 0
    for _ in range(4000):
        link = "".join(generator.choice(pieces) for _ in range(generator.randint(0, 6)))
        base = generator.choice(bases)
        assert canonicalise_url(link, base) == (_canonicalise(link.strip(), base) if link.strip() else None), \
            (link, base)
        fast += bool(link.strip() and _ALREADY_CANONICAL.fullmatch(urljoin(base, link.strip())))
    assert fast > 300  # the fast path was really exercised
    assert canonicalise_url("/product/12", "http://127.0.0.1:8008/shop?page=2") == "http://127.0.0.1:8008/product/12"


def test_joining_a_link_to_its_page_answers_as_urljoin() -> None:
    """Plain links from the root and canonical absolute links are joined without urljoin (an API page's 50 items
    have 50 such links): on random links against random bases, the answer is urljoin's, character for character."""
    import random

    from harvester.urls import _PLAIN_ROOT_PATH, join

    generator = random.Random(34)
    pieces = ["a", "Z", "0", "-", "_", ".", "..", "~", "/", "//", "%41", "é", ":", "@", "?", "#", "&", "=", ";",
              "http://x.org", "https://x.org:8443", "mailto:a", "javascript:", "\\"]
    bases = ["http://127.0.0.1:8008/graphql", "https://shop.example/a/b/", "http://EXAMPLE.com:80/a", "http://x.org",
             "https://x.org:8443/a/b?c=d#e", "http://[::1]:8008/a", "http://u:p@x.org/a", "http://x.org./a",
             "HTTP://x.org/a", "http://x.org:99999/a", "http://x.org#f", "http://x.org?q"]
    plain = 0
    for _ in range(6000):
        link = "".join(generator.choice(pieces) for _ in range(generator.randint(0, 6)))
        link = f"/{link}" if generator.random() < 0.5 else link
        if generator.random() < 0.2:  # a plain path: segments of letters, digits and "-._~"
            link = "".join(f"/{generator.choice(['a', 'b1', 'x.y', 'a-b_c~d', '..', '.e'])}"
                           for _ in range(generator.randint(1, 4))) + generator.choice(["", "/"])
        base = generator.choice(bases)
        assert join(base, link) == urljoin(base, link), (link, base)
        plain += bool(_PLAIN_ROOT_PATH.fullmatch(link))
    assert plain > 300  # the concatenation was really exercised
