"""Whether a detail page still shows its item: gone by status, by a redirect that leaves it, by a soft 404's
markers; and what ``process_page`` makes of each (no extraction of a gone page, the final URL for a
redirect that stays on the item)."""

from __future__ import annotations

from typing import Any

import pytest
from harvester.scraping.extraction import PageData
from harvester.scraping.fetching.page_fetcher import FetchResult
from harvester.scraping.lifecycle import gone_by_markers, gone_by_status, redirect_leaves_item
from harvester.scraping.page import process_page

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit

SITE = "https://shop.example"
PRODUCT = ("<html><head><title>Blue kettle</title></head><body><h1 class='title'>Blue kettle</h1>"
           "<span class='sku'>K-1</span><span class='price'>12.50</span></body></html>")
NOT_FOUND = ("<html><head><title>Oops</title><script>var t = 'Product not found';</script></head><body>"
             "<div class='not-found'><h1>Product   NOT found</h1><p>Browse our other products.</p></div></body></html>")


def source(**overrides: Any):
    return demo_source(SITE, **{"input": {"kind": "details", "seeds": [f"{SITE}/shop/item/1"]}, "listing": None,
                                **overrides})


def fetched(url: str, text: str = PRODUCT, status: int = 200, final_url: str = "", outcome: str = "ok"
            ) -> FetchResult:
    return FetchResult(url=url, outcome=outcome, final_url=final_url or url, status=status, text=text,
                       content_type="text/html")


@pytest.mark.parametrize(("status", "outcome", "gone"), [
    (404, "http_error", "HTTP 404"), (410, "http_error", "HTTP 410"), (500, "http_error", None),
    (403, "blocked", None), (200, "ok", None),
])
def test_404_and_410_mean_gone_other_statuses_do_not(status: int, outcome: str, gone: str | None) -> None:
    assert gone_by_status(source(), fetched(f"{SITE}/shop/item/1", status=status, outcome=outcome)) == gone


def test_the_statuses_are_the_sources() -> None:
    only_410 = source(gone={"statuses": [410]})
    assert gone_by_status(only_410, fetched(f"{SITE}/x", status=404, outcome="http_error")) is None
    assert gone_by_status(only_410, fetched(f"{SITE}/x", status=410, outcome="http_error")) == "HTTP 410"


@pytest.mark.parametrize(("requested", "final", "left"), [
    (f"{SITE}/shop/item/7", f"{SITE}/", "home page"),
    (f"{SITE}/shop/item/7", "https://www.shop.example/", "home page"),
    (f"{SITE}/shop/item/7", f"{SITE}/shop", "redirected up to"),
    (f"{SITE}/shop/item/7", f"{SITE}/shop/", "redirected up to"),
    (f"{SITE}/p/kettle-7", f"{SITE}/p", "redirected up to"),
    # redirects that stay on the item: a scheme, a host name, a new slug, a canonical path
    (f"{SITE}/shop/item/7", "https://www.shop.example/shop/item/7", None),
    ("http://shop.example/shop/item/7", f"{SITE}/shop/item/7", None),
    (f"{SITE}/shop/item/7", f"{SITE}/shop/item/7-blue-kettle", None),
    (f"{SITE}/shop/item/7", f"{SITE}/products/blue-kettle", None),
    (f"{SITE}/shop/item/7", f"{SITE}/shop/item/7", None),
    (f"{SITE}/shop/item/7", f"{SITE}/?item=7", None),  # a query keeps the item: an item page by its parameter
])
def test_a_redirect_leaves_the_item_for_the_home_page_or_an_ancestor(requested: str, final: str,
                                                                     left: str | None) -> None:
    found = redirect_leaves_item(source(), requested, final)
    assert (found is None) if left is None else (found is not None and left in found), found


def test_a_redirect_to_a_listing_seed_or_past_the_follow_pattern_leaves_the_item() -> None:
    listing = demo_source(SITE, input={"kind": "listing", "seeds": [f"{SITE}/catalogue?page=1"]},
                          listing={"link_selectors": ["a"], "follow": r"/item/\d+$"})
    assert "listing page" in redirect_leaves_item(listing, f"{SITE}/item/3", f"{SITE}/catalogue?page=1")
    assert "listing.follow" in redirect_leaves_item(listing, f"{SITE}/item/3", f"{SITE}/search?q=kettle")
    assert redirect_leaves_item(listing, f"{SITE}/item/3", f"{SITE}/item/4") is None  # another item: storage decides


def test_markers_selectors_and_texts_in_visible_text_only() -> None:
    page = PageData(NOT_FOUND, f"{SITE}/x", "html")
    assert "gone.selectors" in gone_by_markers(source(gone={"selectors": [".not-found"]}), page)
    assert "gone.texts" in gone_by_markers(source(gone={"texts": ["product not found"]}), page)
    assert gone_by_markers(source(gone={"texts": ["var t"]}), page) is None  # scripts are not visible text
    product = PageData(PRODUCT, f"{SITE}/x", "html")
    assert gone_by_markers(source(gone={"selectors": [".not-found"], "texts": ["not found"]}), product) is None
    assert gone_by_markers(source(), page) is None  # no markers: nothing is read


def test_process_page_does_not_extract_a_gone_page() -> None:
    soft = process_page(source(gone={"texts": ["Product not found"]}), "details", f"{SITE}/shop/item/1", 0,
                        fetched(f"{SITE}/shop/item/1", NOT_FOUND))
    assert soft.extraction is None and soft.records == [] and "Product not found" in soft.gone
    missing = process_page(source(), "details", f"{SITE}/shop/item/1", 0,
                           fetched(f"{SITE}/shop/item/1", "", status=410, outcome="http_error"))
    assert missing.gone == "HTTP 410"
    home = process_page(source(), "details", f"{SITE}/shop/item/1", 0,
                        fetched(f"{SITE}/shop/item/1", PRODUCT, final_url=f"{SITE}/"))
    assert home.records == [] and "home page" in home.gone


def test_a_listing_page_that_answers_404_is_not_an_item_gone() -> None:
    listing = process_page(source(), "listing", f"{SITE}/shop", 0,
                           fetched(f"{SITE}/shop", "", status=404, outcome="http_error"))
    assert listing.gone is None and not listing.fetch.ok


def test_a_redirect_that_stays_on_the_item_stores_under_the_final_url() -> None:
    moved = process_page(source(), "details", "http://shop.example/shop/item/1", 0,
                         fetched("http://shop.example/shop/item/1", PRODUCT, final_url=f"{SITE}/shop/item/1"))
    assert moved.gone is None and moved.url == f"{SITE}/shop/item/1"
    assert moved.requested_url == "http://shop.example/shop/item/1"
    assert moved.records[0]["url"] == f"{SITE}/shop/item/1"
    same = process_page(source(), "details", f"{SITE}/shop/item/1", 0, fetched(f"{SITE}/shop/item/1"))
    assert same.requested_url is None and same.url == f"{SITE}/shop/item/1"
