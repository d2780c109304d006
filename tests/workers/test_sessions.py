"""Sessions of an HTTP source with a country (harvester.scraping.fetching.sessions over
harvester.pageslots.proxy_pool): the batch runner against real Redis, MongoDB, the demo site and two
`harvester forward-proxy` processes as the SG pool, each leaving from its own loopback address (127.0.0.2,
127.0.0.3), so the site tells the exits apart as a real site tells proxies' addresses apart.

The site's WAF challenges an address past N requests a minute and binds its verdict to a cookie (a request carrying
it is challenged from any address). A session that is challenged retires, its exit is banned from the host, and the
retries go out through the other exit with fresh cookies: every item is stored once, no challenge page is stored,
both exits carried pages and the second exit was never challenged (its session never carried the first's cookie).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import pytest
from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.pageslots import CountryExits, ProxyHealth
from harvester.scraping.fetching import AddressGuard, Sessions

from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.forward_proxy import SG_EXITS
from tests.workers.test_batch import dead_reasons, records, run_until_idle

pytestmark = pytest.mark.integration
EXITS = SG_EXITS  # the pool the sg_exits fixture starts
PRODUCTS = 20
ALLOWANCE = 12  # requests an exit address may make a minute; two exits carry the listing and 20 products


def wall(site, **knobs: Any) -> dict[str, Any]:
    query = "&".join(f"{name}={value}" for name, value in knobs.items())
    request = urllib.request.Request(f"{site.url}/_challenge?{query}", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def wall_figures(site) -> dict[str, Any]:
    with urllib.request.urlopen(f"{site.url}/_challenge", timeout=10) as response:
        return json.load(response)


@pytest.mark.parametrize("status", [200, 403])
def test_a_session_an_exit_address_is_banned_from_retires_and_the_retry_takes_the_other_exit_with_fresh_cookies(
        status, sg_exits, write_source, crawl, demo_site, mongo_server, worker_settings, redis_client) -> None:
    wall(demo_site, after=ALLOWANCE, window=60, status=status, cookie=1)
    source = write_source(f"sg_sessions_{status}", country="SG", robots="ignore", headers={}, retries=3,
                          listing={"link_selectors": ["a.product-link"], "max_depth": 1,
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$"})
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page={PRODUCTS}"))
    run_until_idle(crawl, source, timeout=45)

    stored = list(records(mongo_server, worker_settings, source).find({}, {"url": 1, "sku": 1, "title": 1}))
    assert len(stored) == PRODUCTS and len({record["url"] for record in stored}) == PRODUCTS
    assert all(record["sku"] and record["title"] != "Just a moment..." for record in stored)  # no challenge stored
    assert dead_reasons(redis_client, source) == []
    figures = wall_figures(demo_site)
    assert set(figures["served"]) == set(EXITS), figures  # both exits carried pages, nothing left direct
    assert sum(figures["served"].values()) == PRODUCTS + 1, figures  # every page served once: listing + products
    challenged = set(figures["challenged_by"])
    assert len(challenged) == 1, figures  # the second exit's session never carried the first's verdict cookie
    counters = crawl.store.counters(source.name)
    assert counters.get("outcome:sessions_retired_for_blocks", 0) >= 1, sorted(counters.items())
    assert counters.get("outcome:hosts_paused_for_blocks", 0) == 0, sorted(counters.items())  # another exit, no pause
    banned = EXITS[challenged.pop()]
    states = ProxyHealth(redis_client).states("SG")
    assert states[banned].bans >= 1 and all(state.bans == 0 for name, state in states.items() if name != banned)
    urls = {address: [urlsplit(url).path for url in proxy.stats()["urls"]] for address, proxy in sg_exits.items()}
    assert all(any(path.startswith("/product/") for path in paths) for paths in urls.values()), urls


def test_a_session_is_retired_after_its_uses_its_age_or_a_block_and_its_successor_has_an_empty_jar(
        redis_client, worker_settings, monkeypatch) -> None:
    """Choosing an exit opens no connection, so the pool's proxies need not answer here."""
    for port, connection_id in enumerate(EXITS.values(), start=9):
        monkeypatch.setenv(f"AIRFLOW_CONN_{connection_id.upper()}", f"http://127.0.0.1:{port}")
    source = SourceConfig.model_validate(demo_source_document("http://shop.example", "sessions_unit", country="SG"))
    direct = SourceConfig.model_validate(demo_source_document("http://shop.example", "sessions_direct"))
    forgotten: list[str] = []

    async def scenario() -> None:
        exits = CountryExits(AddressGuard.from_settings(worker_settings), redis_client)
        sessions = Sessions(exits, forgotten.append, max_uses=2, max_age=0.3)
        try:
            assert await sessions.of(direct, "http://shop.example/a") is None  # no country: direct, no session
            first, again = [await sessions.of(source, "http://shop.example/a") for _ in range(2)]
            assert first is again and first.exit.name in EXITS.values()
            other_host = await sessions.of(source, "http://cdn.example/x")
            assert other_host is not first  # one session per site host
            worn = await sessions.of(source, "http://shop.example/b")  # past its two uses
            assert worn is not first and forgotten == [first.key] and "2 requests" in first.retired
            assert await sessions.blocked(worn.key, "HTTP 403") is True  # the other exit still welcomes the host
            assert await sessions.blocked(worn.key, "HTTP 403") is True and forgotten[-1] == worn.key  # once
            successor = await sessions.of(source, "http://shop.example/c")
            assert successor.exit.name != worn.exit.name  # the banned exit goes last
            time.sleep(0.35)
            aged = await sessions.of(source, "http://shop.example/d")
            assert aged is not successor and "old" in successor.retired
        finally:
            await exits.aclose()

    asyncio.run(scenario())
    assert ProxyHealth(redis_client).states("SG")
