"""Block pages told from items: the built-in markers on the challenge pages of the common WAFs, a source's own
``block:`` markers, and no marker firing on real product pages nobody wrote the markers for."""

from __future__ import annotations

import gzip

import pytest
from harvester.config import BlockMarkers
from harvester.scraping import FetchResult, process_page
from harvester.scraping.extraction import BUILTIN_MARKERS, BlockDetector, detection_cpu_ms, recognise_block
from harvester.settings import HarvesterSettings
from harvester_demo.app import page, product_body

from tests.corpora import corpora_folder
from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit

CORPORA = corpora_folder()
CORPUS = CORPORA / "zyte-products" / "html" if CORPORA is not None else None

# The shapes of the vendors' pages (their markup as they serve it, trimmed to what identifies them).
CHALLENGES = {
    "Cloudflare challenge (title": '<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>'
                                   '<meta http-equiv="refresh" content="390"></head><body><div class="main-wrapper">'
                                   '<noscript>Enable JavaScript and cookies to continue</noscript></div></body></html>',
    "Cloudflare challenge (_cf_chl_opt)": "<html><head><title>One moment, please...</title></head><body><script>"
                                          "(function(){window._cf_chl_opt={cvId: '3',cZone: 'shop.example'};"
                                          "}());</script></body></html>",
    "Cloudflare challenge (cf-chl element)": '<html><head><title>Please wait</title></head><body>'
                                             '<div id="cf-chl-widget-x1y2z" class="cf-turnstile"></div></body></html>',
    "Cloudflare block": "<html><head><title>Attention Required! | Cloudflare</title></head><body><h1>Sorry, "
                        "you have been blocked</h1></body></html>",
    "Akamai": '<HTML><HEAD><TITLE>Access Denied</TITLE></HEAD><BODY><H1>Access Denied</H1>You don\'t have '
              'permission to access "http&#58;&#47;&#47;shop&#46;example&#47;p&#47;1" on this server.<P>'
              'Reference&#32;&#35;18&#46;6f2b1002&#46;1699999999&#46;1a2b3c4d</BODY></HTML>',
    "Imperva/Incapsula (incident ID)": "<html><body>Request unsuccessful. Incapsula incident ID: "
                                       "1234000450123456789-12345678901234567</body></html>",
    "Imperva/Incapsula (challenge frame)": '<html style="height:100%"><head><META NAME="ROBOTS" CONTENT="NOINDEX, '
                                           'NOFOLLOW"></head><body style="margin:0px;height:100%"><iframe '
                                           'id="main-iframe" src="/_Incapsula_Resource?CWUDNSAI=9&xinfo=1" '
                                           'frameborder=0 width="100%" height="100%"></iframe></body></html>',
    "DataDome": "<html><head><title>shop.example</title></head><body><script>var dd={'rt':'c','cid':'AHrlqAAA',"
                "'hsh':'2211F522','t':'fe','host':'geo.captcha-delivery.com'}</script><script "
                'src="https://ct.captcha-delivery.com/c.js"></script></body></html>',
    "PerimeterX": '<html><head><title>Access to this page has been denied</title></head><body><div '
                  'id="px-captcha"></div><p>Press &amp; Hold to confirm you are a human (and not a bot).</p>'
                  "</body></html>",
    "CAPTCHA wall": '<html><head><title>Security check</title><script src="https://www.google.com/recaptcha/api.js">'
                    '</script></head><body><h1>Are you a robot?</h1><form><div class="g-recaptcha" '
                    'data-sitekey="6Lc"></div></form></body></html>',
    "'Access denied' page": "<html><head><title>Access denied | shop.example used Cloudflare to restrict access"
                            "</title></head><body></body></html>",
}


@pytest.mark.parametrize("vendor", list(CHALLENGES))
def test_each_builtin_marker_recognises_its_vendors_page(vendor: str) -> None:
    match = BlockDetector(BlockMarkers()).detect(CHALLENGES[vendor])
    assert match is not None and vendor.split(" (")[0] in match.marker, match


def test_every_builtin_marker_is_exercised_by_a_vendor_page() -> None:
    detector = BlockDetector(BlockMarkers())
    named = {detector.detect(body).marker for body in CHALLENGES.values()}  # type: ignore[union-attr]
    assert named == {f"built-in {marker.name}" for marker in BUILTIN_MARKERS}


@pytest.mark.parametrize("body", [
    page("Widget 1", product_body(1)),
    # a login form with a reCAPTCHA widget is a page of the site, not a wall
    page("Sign in", '<form><input name="user"><div class="g-recaptcha" data-sitekey="k"></div></form>'),
    # phrases in an item's own text, not in the page's title or heading
    page("Lamp", '<p class="description">Access denied to dust: sealed. Just a moment... and it shines.</p>'),
    # Imperva's script on a protected page that answered normally
    page("Lamp", '<script src="/_Incapsula_Resource?SWJIYLWA=719d34d31c8e3a6e6fffd425f7e032f3"></script><h1>Lamp</h1>'),
])
def test_item_pages_are_not_blocks(body: str) -> None:
    assert BlockDetector(BlockMarkers()).detect(body) is None


@pytest.mark.skipif(CORPUS is None or not CORPUS.is_dir(), reason="needs ../shared/corpora (shared test material)")
def test_no_builtin_marker_fires_on_real_product_pages() -> None:
    """140 product pages of real shops, saved by a benchmark nobody here wrote: none is a block."""
    detector = BlockDetector(BlockMarkers())
    assert CORPUS is not None
    pages = sorted(CORPUS.glob("*.html.gz"))
    assert len(pages) == 140
    fired = {path.name: detector.detect(gzip.decompress(path.read_bytes()).decode("utf-8", "replace"))
             for path in pages}
    assert {name: match for name, match in fired.items() if match is not None} == {}


def test_a_sources_own_selectors_texts_and_statuses() -> None:
    detector = BlockDetector(BlockMarkers(selectors=["div.wall", "xpath://form[@id='gate']"],
                                          texts=["Request Rejected"], statuses=[503, 999]))
    assert detector.detect('<div class="wall">stop</div>').marker == "selector 'div.wall'"
    assert detector.detect('<form id="gate"></form>').marker == "selector \"xpath://form[@id='gate']\""
    assert detector.detect("<p>request rejected.</p>").marker == "text 'Request Rejected'"  # any case
    assert detector.status_block(999).marker == "block.statuses: HTTP 999"
    assert detector.status_block(500) is None and detector.status_block(None) is None
    assert detector.detect(page("Widget", product_body(2))) is None


def test_builtin_false_leaves_only_the_sources_markers() -> None:
    challenge = CHALLENGES["Cloudflare challenge (title"]
    assert BlockDetector(BlockMarkers(builtin=False)).detect(challenge) is None
    assert BlockDetector(BlockMarkers(builtin=False), ["enable javascript"]).detect(challenge) is not None


def test_only_fetches_that_may_be_blocks_in_disguise_are_examined() -> None:
    detector = BlockDetector(BlockMarkers())
    assert recognise_block(detector, "http_error", 503, CHALLENGES["DataDome"]) == (
        "blocked", "block page: built-in DataDome (captcha-delivery.com)")
    assert recognise_block(detector, "parse_error", 200, CHALLENGES["DataDome"]) is not None  # a JSON source's
    assert recognise_block(detector, "blocked", 403, CHALLENGES["DataDome"]) is None  # a block already, same reason
    assert recognise_block(detector, "not_modified", 304, CHALLENGES["DataDome"]) is None
    assert recognise_block(detector, "timeout", None, "") is None


def test_a_challenge_that_answers_200_is_blocked_and_never_extracted() -> None:
    source = demo_source("http://shop", attributes={"title": {"css": "h1"}, "price": {"css": ".price"}})
    settings = HarvesterSettings()
    fetch = FetchResult("http://shop/product/1", "ok", status=200, text=CHALLENGES["Cloudflare challenge (title"])
    result = process_page(source, "details", fetch.url, 0, fetch, settings=settings)
    assert (fetch.outcome, result.extraction) == ("blocked", None)
    assert fetch.reason == "block page: built-in Cloudflare challenge (title 'Just a moment...')"
    good = FetchResult("http://shop/product/1", "ok", status=200, text=page("Widget", product_body(1)))
    assert process_page(source, "details", good.url, 0, good, settings=settings).extraction.record is not None


def test_a_listing_page_that_is_a_challenge_yields_no_links() -> None:
    source = demo_source("http://shop")
    fetch = FetchResult("http://shop/shop", "ok", status=200, text=CHALLENGES["PerimeterX"])
    result = process_page(source, "listing", fetch.url, 0, fetch, settings=HarvesterSettings())
    assert fetch.outcome == "blocked" and result.discovery is None


def test_a_status_the_source_names_turns_an_http_error_into_a_block() -> None:
    source = demo_source("http://shop", block={"statuses": [503]})
    fetch = FetchResult("http://shop/product/1", "http_error", status=503, reason="HTTP 503")
    process_page(source, "details", fetch.url, 0, fetch, settings=HarvesterSettings())
    assert (fetch.outcome, fetch.reason) == ("blocked", "block page: block.statuses: HTTP 503")
    other = FetchResult("http://shop/product/1", "http_error", status=502, reason="HTTP 502")
    process_page(source, "details", other.url, 0, other, settings=HarvesterSettings())
    assert other.outcome == "http_error"


def test_detection_cost_is_timed_on_one_page() -> None:
    assert detection_cpu_ms(page("Widget", product_body(3)), repeat=5) >= 0.0
