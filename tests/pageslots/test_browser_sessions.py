"""Browser sessions over a country's proxy pool (harvester.scraping.browser.slot_browser with
harvester.pageslots.proxy_pool): real Chromium, real Redis, the demo site and two `harvester forward-proxy`
processes leaving from their own loopback addresses (127.0.0.2, 127.0.0.3).

With a pool of several proxies each browser context is a session pinned to one exit. The site's WAF challenges an
address past N requests a minute and binds its verdict to a cookie: the challenged context's exit is banned from
the host, the slot closes the page as it does on every block, and the retry's fresh context goes out through the
other exit with no cookie of the first, so every page comes and the second exit is never challenged."""

from __future__ import annotations

import asyncio

import pytest
import redis
from harvester.config.model import SourceConfig
from harvester.pageslots.proxy_pool import HealthTrackedPool, ProxyHealth, proxy_pool
from harvester.scraping.browser.slot_browser import SlotBrowser
from harvester.settings import HarvesterSettings

from tests.fixtures.hostile_hosts import ALLOW_BOTH
from tests.pageslots.test_browser_host import browser_source_document
from tests.workers.test_sessions import EXITS, wall, wall_figures

pytestmark = pytest.mark.integration
ALLOWANCE = 3  # pages an exit address may load a minute
PAGES = 5


def test_a_blocked_context_bans_its_exit_and_the_retry_browses_through_the_other_with_fresh_cookies(
        sg_exits, demo_site, redis_client: redis.Redis) -> None:
    wall(demo_site, after=ALLOWANCE, window=60, status=200, cookie=1)
    # no X-Demo-Client header: the site tells clients by the address they come from
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "browser_sessions", headers={},
                                                                 robots="ignore"))
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH, page_slot_retry_delay_seconds=0.05)

    async def scenario() -> list[str]:
        endings: list[str] = []
        async with SlotBrowser("sessions", None, settings) as browser:
            browser.proxy_pool = HealthTrackedPool("SG", proxy_pool("SG"), ProxyHealth(redis_client))
            for index in range(1, PAGES + 1):
                for _ in range(3):  # a blocked page is retried, as its task would be
                    render = await browser.render(f"{demo_site.url}/product/{index}", source)
                    endings.append(render.ending)
                    if render.ending != "blocked":
                        break
                    await browser.close_page()  # what the slot does on a block: the next task's context is fresh
                assert render.fetch.ok and "Just a moment" not in render.fetch.text, render.fetch.reason
        return endings

    endings = asyncio.run(scenario())
    assert endings.count("blocked") == 1, endings  # one block, then the other exit carried the rest
    figures = wall_figures(demo_site)
    assert set(figures["served"]) == set(EXITS), figures
    assert sum(figures["served"].values()) == PAGES, figures
    challenged = set(figures["challenged_by"])
    assert len(challenged) == 1, figures  # the second exit's context never carried the first's verdict cookie
    states = ProxyHealth(redis_client).states("SG")
    assert states[EXITS[challenged.pop()]].bans == 1
