"""Nothing raised while reading a fetched body leaves the fetcher or the page step as an exception: a date out
of a datetime's range is "no lastmod", and a body that breaks any parser the fetcher or the page step uses is
that page's ``parse_error``, while the pages fetched beside it come back as they would alone. The site is a real
server (tests.fixtures.hostile_hosts); the parsers that no real body is known to break are made to break by the
test for one marked page, since what matters is that the failure stays with that page."""

from __future__ import annotations

import asyncio

import pytest
from harvester.scraping.discovery.sitemaps import SitemapFetcher, parse_lastmod
from harvester.scraping.fetching.fetcher import Fetcher
from harvester.scraping.page import process_page
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source
from tests.fixtures.hostile_hosts import ALLOW_BOTH

pytestmark = pytest.mark.integration
PAGE = '<html><body><h1 class="title">{name}</h1><span class="sku">SKU-1</span></body></html>'
FAR_DATES = ["9999-12-31T23:59:59-01:00", "Fri, 31 Dec 9999 23:59:59 -0100", "9999-12-31T23:30:00-00:45"]


@pytest.mark.unit
@pytest.mark.parametrize("value", FAR_DATES)
def test_a_date_past_what_a_datetime_holds_in_utc_is_no_lastmod(value: str) -> None:
    assert parse_lastmod(value) is None
    assert parse_lastmod("2024-03-05T10:30:00+02:00").isoformat() == "2024-03-05T08:30:00+00:00"


FEEDS = {
    "/urlset.xml": ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    '<url><loc>{base}/p/1</loc><lastmod>9999-12-31T23:59:59-01:00</lastmod></url>'
                    '<url><loc>{base}/p/2</loc><lastmod>2024-01-02</lastmod></url></urlset>'),
    "/rss.xml": ('<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
                 '<item><link>{base}/p/1</link><pubDate>Fri, 31 Dec 9999 23:59:59 -0100</pubDate></item>'
                 '<item><link>{base}/p/2</link><pubDate>Tue, 02 Jan 2024 00:00:00 +0000</pubDate></item>'
                 '</channel></rss>'),
    "/atom.xml": ('<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>'
                  '<entry><link href="{base}/p/1"/><updated>9999-12-31T23:59:59-01:00</updated></entry>'
                  '<entry><link href="{base}/p/2"/><updated>2024-01-02T00:00:00Z</updated></entry></feed>'),
}


@pytest.mark.parametrize("path", sorted(FEEDS))
def test_a_sitemap_or_feed_with_a_date_out_of_range_keeps_every_entry(site, path: str) -> None:
    """The out-of-range date raised OverflowError out of the fetcher and failed the whole batch on every
    redelivery; the entry is kept, without a lastmod."""
    site.route(path, text=FEEDS[path].format(base=site.url), content_type="application/xml")
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH)

    async def run():
        async with Fetcher(settings) as pages:
            return await SitemapFetcher(settings, pages).fetch(f"{site.url}{path}",
                                                               demo_source(site.url, robots="ignore"))

    fetch = asyncio.run(run())
    assert fetch.ok, fetch.reason
    pages = fetch.document.pages
    assert [entry.url for entry in pages] == [f"{site.url}/p/1", f"{site.url}/p/2"]
    assert pages[0].lastmod is None and pages[1].lastmod.year == 2024


def break_for(marker: str, original):
    """``original``, except that it raises when called with the marked page's data (as a parser would)."""
    def broken(*args, **kwargs):
        if any(marker in str(argument) for argument in (*args, *kwargs.values())):
            raise ValueError(f"a parser broke on {marker}")
        return original(*args, **kwargs)
    return broken


def parser_faults(monkeypatch) -> dict[str, str]:
    """Each parser the fetcher uses, broken for one page (name -> path of that page)."""
    from harvester.scraping.fetching import cookies, fetcher, responses, robots

    monkeypatch.setattr(fetcher, "decode_text", break_for("charset-breaks", fetcher.decode_text))
    monkeypatch.setattr(cookies.SourceCookieJars, "store", break_for("cookie-breaks", cookies.SourceCookieJars.store))
    monkeypatch.setattr(responses, "parse_retry_after", break_for("retry-breaks", responses.parse_retry_after))
    monkeypatch.setattr(robots.Protego, "parse", break_for("robots-breaks", robots.Protego.parse))
    return {"charset": "/charset", "cookie": "/cookie", "retry_after": "/retry", "robots": "/p"}


def test_a_body_that_breaks_any_parser_of_the_fetcher_fails_only_its_page(site, attacker, monkeypatch) -> None:
    faults = parser_faults(monkeypatch)
    site.route("/charset", text=PAGE.format(name="charset-breaks"), content_type="text/html")
    site.route("/cookie", text=PAGE.format(name="c"), content_type="text/html",
               headers={"Set-Cookie": "cookie-breaks=1"})
    site.route("/retry", status=503, text="busy", headers={"Retry-After": "retry-breaks"})
    site.route("/fine", text=PAGE.format(name="fine"), content_type="text/html")
    attacker.route("/robots.txt", text="User-agent: *\nDisallow: /robots-breaks\n", content_type="text/plain")
    attacker.route("/p", text=PAGE.format(name="other host"), content_type="text/html")
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH)
    urls = [f"{site.url}{faults['charset']}", f"{site.url}{faults['cookie']}", f"{site.url}{faults['retry_after']}",
            f"{attacker.url}{faults['robots']}", f"{site.url}/fine"]

    async def run():
        async with Fetcher(settings) as fetcher:
            return (await fetcher.fetch_all(urls, demo_source(site.url, robots="obey"))).results

    charset, cookie, retry, robots_page, fine = asyncio.run(run())
    for broken in (charset, cookie, retry, robots_page):
        assert broken.outcome == "parse_error" and "a parser broke" in broken.reason, (broken.url, broken.reason)
    assert fine.ok and "fine" in fine.text


def test_a_page_that_breaks_the_extraction_fails_alone(site, monkeypatch) -> None:
    from harvester.scraping import page

    monkeypatch.setattr(page, "extract_record", break_for("extraction-breaks", page.extract_record))
    site.route("/extraction-breaks", text=PAGE.format(name="one"), content_type="text/html")
    site.route("/b", text=PAGE.format(name="fine"), content_type="text/html")
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH)
    source = demo_source(site.url, robots="ignore")

    async def run():
        async with Fetcher(settings) as fetcher:
            return (await fetcher.fetch_all([f"{site.url}/extraction-breaks", f"{site.url}/b"], source)).results

    fetches = asyncio.run(run())
    broken, fine = [process_page(source, "detail", fetch.url, 0, fetch, settings=settings) for fetch in fetches]
    assert broken.fetch.outcome == "parse_error" and "a parser broke" in broken.fetch.reason
    assert broken.records == []
    assert fine.fetch.ok and fine.records and fine.records[0]["sku"] == "SKU-1"
