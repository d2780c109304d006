"""Hostile sites, round three, on the page side: the attribute cap counts attributes however a tokenizer
separates them (whitespace, ``/``, nothing after a quoted value), so libxml2's quadratic duplicate check never
sees a wide element; listing links are cut by ``max_new_urls`` before robots.txt screens them; a site cannot fill
its source's cookie jar, nor make each request carry a huge Cookie header."""

from __future__ import annotations

import time

import pytest
from harvester.scraping.extraction.markup import markup_refusal

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("separated", [
    lambda count: " ".join(f"a{n}=x" for n in range(count)),
    lambda count: "/".join(f"a{n}" for n in range(count)),
    lambda count: "".join(f'a{n}=""' for n in range(count)),
    lambda count: "".join(f"a{n}='v'" for n in range(count)),
    lambda count: "/".join(f'a{n}="v"' for n in range(count)),
], ids=["whitespace", "slash", "after_double_quotes", "after_single_quotes", "slash_after_quotes"])
def test_an_element_is_as_wide_as_its_attributes_however_they_are_separated(separated) -> None:
    """``a0=""a1=""`` and ``a0/a1`` passed the cap (it counted whitespace-separated attributes only): 120,000 of
    them kept libxml2 busy for 22 s."""
    for count, refused in ((120_000, True), (501, True), (400, False)):
        page = f"<html><body><div {separated(count)}>x</div></body></html>"
        started = time.process_time()
        reason = markup_refusal(page, 500, 300_000)
        assert (reason is not None) is refused, (count, reason)
        assert time.process_time() - started < 1.0
    assert "max_attributes_per_element" in markup_refusal(f"<p {separated(600)}>", 500, 300_000)


@pytest.mark.parametrize("page", [
    "<div " + "a" * 200_000 + "=x>",  # one long name is one attribute
    "<a href=" + "b" * 200_000 + ">",  # one long unquoted value too
    '<div class="' + " x" * 100_000 + '">',  # a quoted value is read as a value
    "<div " + " ".join(f"data-n{n}='{n}'" for n in range(450)) + ">",
])
def test_long_names_values_and_many_but_allowed_attributes_pass(page: str) -> None:
    assert markup_refusal(page, 500, 300_000) is None


@pytest.mark.integration
def test_a_site_cannot_fill_its_sources_cookie_jar_or_make_each_request_heavy(site) -> None:
    """A site setting 100 cookies a page for 30 pages filled the jar to 3,000 and made each request carry a 329 kB
    Cookie header; a host keeps its first 50 and the header stays under 8 KiB, the first cookie still sent."""
    import asyncio

    from aiohttp import web
    from harvester.scraping.fetching.cookies import MAX_COOKIE_HEADER_BYTES, MAX_COOKIES_PER_HOST
    from harvester.scraping.fetching.fetcher import Fetcher
    from harvester.settings import HarvesterSettings

    from tests.fixtures.demo_site import demo_source
    from tests.fixtures.hostile_hosts import ALLOW_BOTH

    async def flood(request: web.Request) -> web.StreamResponse:
        response = web.Response(text="<html><body><h1 class='title'>t</h1></body></html>", content_type="text/html")
        page = int(request.query.get("n", "0"))
        for number in range(100):
            response.set_cookie(f"c{page}_{number}", "v" * 100)
        return response

    site.route("/flood", flood)
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH)
    source = demo_source(site.url, robots="ignore")

    async def run() -> None:
        async with Fetcher(settings) as fetcher:
            for page in range(30):
                assert (await fetcher.fetch(f"{site.url}/flood?n={page}", source)).ok

    asyncio.run(run())
    last = site.headers_of("/flood?n=29")[0]["cookie"]
    assert len(last) <= MAX_COOKIE_HEADER_BYTES and last.count("=") <= MAX_COOKIES_PER_HOST, len(last)
    assert "c0_0=" in last  # the first cookies the site set are the ones kept
