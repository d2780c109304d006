"""The browser path refuses what the HTTP path refuses (issue 12): navigations and redirect hops to
forbidden addresses or schemes, through Playwright routing in a real Chromium."""

from __future__ import annotations

import asyncio

import pytest
from harvester.scraping.browser import render_page
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("target,reason", [
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://127.0.0.2:{port}/product/1", "loopback"),
])
def test_browser_redirects_to_forbidden_addresses_are_refused(demo_site, target: str, reason: str) -> None:
    source = demo_source(demo_site.url, render="browser", country="SG")
    url = f"{demo_site.url}/hostile/redirect?to={target.format(port=demo_site.port)}"
    fetch = asyncio.run(render_page(url, source, HarvesterSettings()))
    assert fetch.outcome == "refused" and reason in fetch.reason
    assert not fetch.retryable


def test_browser_navigation_to_loopback_without_allow_list_is_refused(demo_site) -> None:
    source = demo_source(demo_site.url, render="browser", country="SG")
    fetch = asyncio.run(render_page(f"{demo_site.url}/product/1", source,
                                    HarvesterSettings(allowed_private_networks="")))
    assert fetch.outcome == "refused" and "loopback" in fetch.reason


def test_browser_still_renders_allowed_pages_and_redirects(demo_site) -> None:
    source = demo_source(demo_site.url, render="browser", country="SG")
    fetch = asyncio.run(render_page(f"{demo_site.url}/redirect/2", source, HarvesterSettings()))
    assert fetch.ok and "SKU-00003" in fetch.text and fetch.final_url.endswith("/product/3")
