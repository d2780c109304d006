"""The in-process browser host (harvester.pageslots.browser_host, the pipeline's BrowserPageFetcher) with
real Chromium and the demo site; slot hosting itself is tested in test_slot_hosting.py."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from harvester.config.model import SourceConfig
from harvester.metrics.recording import QUEUE_LATENCY_SECONDS, bucket_field, record_fetches
from harvester.pageslots.host import BrowserHost, SlotState
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source_document

BLOCKED_TYPES = ["image", "font", "media", "stylesheet"]


def browser_source_document(base_url: str, name: str, **overrides: Any) -> dict[str, Any]:
    """A detail-page source rendered in SG page slots; title and sku only exist once JavaScript ran
    on the /js/ pages (on the plain /product/ pages they are in the HTML)."""
    document = demo_source_document(base_url, name)
    document.pop("listing")
    document.update({
        "render": "browser", "country": "SG", "input": {"kind": "details", "seeds": [f"{base_url}/product/1"]},
        "attributes": {"title": {"css": "h1.title::text", "required": True},
                       "sku": {"css": "span.sku::text", "required": True},
                       "price": {"css": "span.price::text", "type": "float"},
                       "released": {"css": "time.released::attr(datetime)", "type": "date"}},
        "output": {"key": ["sku"]}, "rate_limit": {"max_active": 2, "per_minute": 100_000},
        "blocked_resource_types": BLOCKED_TYPES, "retries": 1, "timeout": 10,
    })
    document.update(overrides)
    return document


@pytest.mark.integration
def test_host_renders_blocks_closes_blocked_pages_and_idles_out(demo_site) -> None:
    settings = HarvesterSettings(page_slot_idle_seconds=0.5, page_slot_retry_delay_seconds=0.05)
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "host_only"))

    async def scenario() -> None:
        async with BrowserHost(settings) as host:
            first = await host.render(f"{demo_site.url}/js/product/3", source)
            assert first.ok and "SKU-00003" in first.text and 'class="ready"' in first.text
            assert first.blocked_requests == 3  # the stylesheet, the font preload and the product photo
            assert host.states() == {"SG": SlotState.PAGE_READY}
            refused = await host.render(f"{demo_site.url}/blocked", source)
            assert refused.outcome == "blocked" and refused.status == 403
            assert host.states() == {"SG": SlotState.NO_PAGE}  # a blocked task closes the page
            assert host.browser_open and host.totals.blocked_closes == 1
            assert not await host.close_if_idle()
            await asyncio.sleep(0.6)
            assert await host.close_if_idle() and not host.browser_open
            assert host.totals.browser_launches == 1 and host.totals.transferred_bytes > 0
            assert host.totals.blocked_requests == {"stylesheet": 2, "font": 2, "image": 1}

    asyncio.run(scenario())
    assert demo_site.client_stats("host_only")["total"] == 2  # nothing blocked ever reached the site


@pytest.mark.integration
def test_a_crashed_browser_is_relaunched_by_the_next_load(demo_site) -> None:
    settings = HarvesterSettings(page_slot_retry_delay_seconds=0.05)
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "host_crash"))

    def own_browsers() -> list[psutil.Process]:
        return [process for process in psutil.Process().children(recursive=True)
                if "chrom" in process.name() and not any(a.startswith("--type=") for a in process.cmdline())]

    async def scenario() -> None:
        async with BrowserHost(settings) as host:
            assert (await host.render(f"{demo_site.url}/js/product/4", source)).ok
            (browser,) = own_browsers()
            browser.kill()
            browser.wait(timeout=10)
            again = await host.render(f"{demo_site.url}/js/product/5", source)
            assert again.ok and "SKU-00005" in again.text
            assert host.totals.browser_launches == 2
            assert host.totals.failed_loads <= 1  # at most the load that found the dead browser
            assert [process.pid for process in own_browsers()] != [browser.pid]

    asyncio.run(scenario())


@pytest.mark.integration
def test_browser_loads_stamp_their_start_so_queue_latency_ends_at_the_fetch(demo_site, redis_client) -> None:
    """Like HTTP fetches, a page load carries its wall-clock start: the queue-latency histogram measures
    enqueue -> fetch start, not enqueue -> whenever the batch was recorded."""
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "host_latency"))

    async def render() -> Any:
        async with BrowserHost(HarvesterSettings()) as host:
            return await host.render(f"{demo_site.url}/js/product/6", source)

    before = time.time()
    fetch = asyncio.run(render())
    after = time.time()
    assert fetch.ok and before <= fetch.started_at <= after
    enqueued = SimpleNamespace(enqueued_at=fetch.started_at - 3.0, url=fetch.url, run_id=None)  # waited 3 s
    record_fetches(redis_client, source.name, [enqueued], [fetch], now=after + 600)  # recorded 10 min later
    histograms = {k.decode(): v.decode() for k, v in redis_client.hgetall(SourceKeys(source.name).histograms).items()}
    assert histograms[bucket_field(QUEUE_LATENCY_SECONDS, 3.0)] == "1"
    assert float(histograms[f"{QUEUE_LATENCY_SECONDS}:sum"]) == pytest.approx(3.0)


def test_a_slot_browser_opens_a_fresh_page_after_its_page_served_enough(demo_site) -> None:
    """One page navigated for ever grows its renderer (85 MB after one load, 195 MB after 60, bench/pageslots.py):
    after page_slot_reopen_page_after_pages loads the slot's next load gets a new context and page, in the same
    browser."""
    from harvester.pageslots.host import SlotBrowser

    settings = HarvesterSettings(page_slot_reopen_page_after_pages=2, page_slot_allow_direct_connections=True)
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "reopening"))

    async def scenario() -> None:
        browser = SlotBrowser("reopen-test", None, settings)
        try:
            pages, browser_pids = [], set()
            for number in range(1, 6):
                loaded = await browser.load(f"{demo_site.url}/js/product/{number}", source)
                assert loaded.fetch.ok and f"SKU-{number:05d}" in loaded.fetch.text
                pages.append(browser.page)
                browser_pids.add(browser.pid)
            assert [pages.index(page) for page in pages] == [0, 0, 2, 2, 4]  # fresh pages for loads 3 and 5
            assert browser.reopens == 2 and browser.launches == 1 and len(browser_pids) == 1
            assert pages[0].is_closed() and not pages[4].is_closed()
        finally:
            await browser.close()

    asyncio.run(scenario())


@pytest.mark.integration
def test_a_source_s_http_connection_reaches_its_site_only_and_its_cookies_stay_in_its_visit(demo_site,
                                                                                           monkeypatch) -> None:
    """Basic auth and headers of ``http_connection_id`` go to the task's site only; its cookies are set on the
    visit's context, so the next source's visit, in the same browser, carries none of them."""
    from harvester_demo.hostile import BASIC_AUTH_PASSWORD, BASIC_AUTH_USER

    monkeypatch.setenv("AIRFLOW_CONN_SHOP_LOGIN", json.dumps({
        "conn_type": "http", "login": BASIC_AUTH_USER, "password": BASIC_AUTH_PASSWORD,
        "extra": {"cookies": {"session": "s3cret"}}}))
    attributes = {"sku": {"css": "span.sku::text", "required": True}, "sent": {"css": "span.cookie-header::text"}}
    member = SourceConfig.model_validate(browser_source_document(demo_site.url, "members", attributes=attributes,
                                                                 http_connection_id="shop_login"))
    visitor = SourceConfig.model_validate(browser_source_document(demo_site.url, "visitors", attributes=attributes))

    async def scenario() -> list[Any]:
        async with BrowserHost(HarvesterSettings(page_slot_retry_delay_seconds=0.05)) as host:
            return [await host.render(f"{demo_site.url}/auth/basic/3", member),
                    await host.render(f"{demo_site.url}/cookie/show", member),
                    await host.render(f"{demo_site.url}/cookie/show", visitor),
                    await host.render(f"{demo_site.url}/auth/basic/3", visitor)]

    logged_in, member_cookies, visitor_cookies, refused = asyncio.run(scenario())
    assert logged_in.ok and "SKU-00003" in logged_in.text
    assert 'class="cookie-header">session=s3cret<' in member_cookies.text
    assert 'class="cookie-header">none<' in visitor_cookies.text
    assert refused.outcome == "http_error" and refused.status == 401


@pytest.mark.integration
def test_a_challenge_that_answers_200_is_a_block_in_the_browser_too(demo_site) -> None:
    """The same markers as the HTTP path: Chromium renders the WAF's "Just a moment..." (status 200), the task is
    blocked naming the marker, and the slot closes its page so the next task gets a fresh context."""
    settings = HarvesterSettings(page_slot_idle_seconds=5, page_slot_retry_delay_seconds=0.05)
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "host_challenge"))

    async def scenario() -> None:
        async with BrowserHost(settings) as host:
            challenge = await host.render(f"{demo_site.url}/challenge", source)
            assert (challenge.outcome, challenge.status) == ("blocked", 200)
            assert challenge.reason == "block page: built-in Cloudflare challenge (title 'Just a moment...')"
            assert host.states() == {"SG": SlotState.NO_PAGE} and host.totals.blocked_closes == 1
            assert (await host.render(f"{demo_site.url}/product/2", source)).ok  # a fresh page: items come again

    asyncio.run(scenario())
