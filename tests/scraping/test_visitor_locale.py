"""A source's visitor (harvester.config.locales): a browser context of a MY source speaks MY's locale in MY's time
zone, and its requests and an HTTP source's carry MY's Accept-Language; a source's ``visitor`` overrides each
value; a source of another country in the same browser gets a context of its own. Real Chromium, a real site."""

from __future__ import annotations

import asyncio

import pytest
from harvester.config import COUNTRY_VISITORS, Visitor
from harvester.scraping.fetching.fetcher import Fetcher, request_headers
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source
from tests.fixtures.hostile_hosts import ALLOW_BOTH

PAGE = '<html><body><h1 class="title">a page</h1><span class="sku">SKU-1</span></body></html>'
PRESENTED = "() => [navigator.language, Intl.DateTimeFormat().resolvedOptions().timeZone]"


def test_the_country_table_names_real_locales_and_time_zones() -> None:
    for country, visitor in COUNTRY_VISITORS.items():
        assert Visitor.model_validate(visitor.model_dump()) == visitor, country  # babel and zoneinfo know them


@pytest.mark.integration
@pytest.mark.slow
def test_a_my_context_reports_my_locale_and_time_zone_and_a_source_overrides_them(site) -> None:
    for path in ("/my", "/my-own", "/sg"):
        site.route(path, text=PAGE, content_type="text/html")
    common = {"render": "browser", "robots": "ignore", "blocked_resource_types": []}
    my_source = demo_source(site.url, "my_shop", country="MY", **common)
    own_source = demo_source(site.url, "my_own", country="MY", **common,
                             visitor={"locale": "ms-MY", "timezone_id": "Asia/Kuching"})
    sg_source = demo_source(site.url, "sg_shop", country="SG", **common)
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH, page_slot_retry_delay_seconds=0.05)

    async def presented() -> list[list[str]]:
        from harvester.scraping.browser.slot_browser import SlotBrowser

        seen = []
        async with SlotBrowser("visitor", None, settings) as browser:
            for path, source in (("/my", my_source), ("/my-own", own_source), ("/sg", sg_source)):
                assert (await browser.render(f"{site.url}{path}", source)).fetch.ok
                assert browser.page is not None
                seen.append(await browser.page.evaluate(PRESENTED))
        return seen

    assert asyncio.run(presented()) == [["en-MY", "Asia/Kuala_Lumpur"], ["ms-MY", "Asia/Kuching"],
                                        ["en-SG", "Asia/Singapore"]]
    # Chromium's Accept-Language is its context's locale (Playwright sets one from the other)
    assert [site.headers_of(path)[0]["accept-language"] for path in ("/my", "/my-own", "/sg")] == [
        "en-MY", "ms-MY", "en-SG"]


@pytest.mark.integration
def test_an_http_source_sends_its_country_s_accept_language_unless_it_names_its_own(site) -> None:
    site.route("/page", text=PAGE, content_type="text/html")
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH)
    my_source = demo_source(site.url, "my_http", country="MY", robots="ignore")
    own_source = demo_source(site.url, "my_http_own", country="MY", robots="ignore",
                             visitor={"accept_language": "ms-MY,ms;q=0.9"})
    header_source = demo_source(site.url, "my_http_header", country="MY", robots="ignore",
                                headers={"Accept-Language": "zh-MY"})
    plain = demo_source(site.url, "plain_http", robots="ignore")
    assert request_headers(plain, settings)["Accept-Language"] == "en-US,en;q=0.9"  # Harvester's own, as before

    async def fetch_all() -> None:
        async with Fetcher(settings) as fetcher:
            for source in (my_source, own_source, header_source):
                assert (await fetcher.fetch(f"{site.url}/page", source)).ok

    asyncio.run(fetch_all())
    assert [headers["accept-language"] for headers in site.headers_of("/page")] == [
        COUNTRY_VISITORS["MY"].accept_language, "ms-MY,ms;q=0.9", "zh-MY"]
