"""Proxy tiers end to end: the batch runner against real Redis, MongoDB, the demo site and a `harvester forward-proxy`
leaving from 127.0.0.2 as the SG datacenter tier (``proxy_sg_datacenter``). The source's tiers are
``[direct, datacenter]``; the site's WAF stands before the worker's own address (127.0.0.1) only and blocks it past
N requests a minute. The host starts direct, moves up to the datacenter tier on the blocks, every item is stored
once and no challenge page is stored; once the quiet period is over (the site relented) the host comes back down
and its pages go direct again. Each tier's requests and bytes are in the run's figures (the report's proxy_tiers)."""

from __future__ import annotations

import time

import pytest
from harvester.distributor import TaskMessage
from harvester.pageslots.proxy_tiers import ProxyTiers
from harvester.storage import RunFigures

from tests.workers.test_batch import dead_reasons, records, run_until_idle
from tests.workers.test_sessions import wall, wall_figures

pytestmark = pytest.mark.integration
PRODUCTS = 20
ALLOWANCE = 5  # requests the worker's own address may make a minute
QUIET = 3.0  # s
DIRECT, DATACENTER = "127.0.0.1", "127.0.0.2"


@pytest.fixture
def datacenter_tier(forward_proxy_factory, monkeypatch):
    proxy = forward_proxy_factory("SG-datacenter", source_address=DATACENTER)
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_DATACENTER", proxy.url)
    return proxy


@pytest.mark.parametrize("status", [200, 403])
def test_a_host_that_blocks_the_direct_tier_moves_up_and_comes_back_down_after_the_quiet_period(
        status, datacenter_tier, write_source, crawl, demo_site, mongo_server, worker_settings, redis_client) -> None:
    wall(demo_site, after=ALLOWANCE, window=60, status=status, clients=DIRECT)
    source = write_source(f"sg_tiers_{status}", country="SG", robots="ignore", headers={}, retries=3,
                          proxy={"tiers": ["direct", "datacenter"], "quiet": f"{QUIET:g}s"},
                          listing={"link_selectors": ["a.product-link"], "max_depth": 1,
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$"})
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page={PRODUCTS}"))
    run_until_idle(crawl, source, timeout=45)

    stored = list(records(mongo_server, worker_settings, source).find({}, {"url": 1, "sku": 1, "title": 1}))
    assert len(stored) == PRODUCTS and len({record["url"] for record in stored}) == PRODUCTS, (
        dead_reasons(redis_client, source), sorted(crawl.store.counters(source.name).items()), wall_figures(demo_site))
    assert all(record["sku"] and record["title"] != "Just a moment..." for record in stored)  # no challenge stored
    assert dead_reasons(redis_client, source) == []
    figures = wall_figures(demo_site)
    assert figures["served"][DIRECT] == ALLOWANCE, figures  # direct until the wall, then the datacenter tier
    assert figures["served"][DATACENTER] == PRODUCTS + 1 - ALLOWANCE, figures
    assert set(figures["challenged_by"]) == {DIRECT}, figures
    (host,) = ProxyTiers(redis_client).hosts(source.name, ["direct", "datacenter"])
    assert (host.tier, host.moves_up, host.moves_down) == ("datacenter", 1, 0)
    counters = crawl.store.counters(source.name)
    assert counters.get("outcome:hosts_paused_for_blocks", 0) == 0, sorted(counters.items())  # a tier up, no pause

    run, _ = RunFigures(redis_client).read(source.name, None)
    assert run["proxy_tier_requests:direct"] >= ALLOWANCE + 1  # the blocked ones too: each attempt is a request
    assert run["proxy_tier_requests:datacenter"] == PRODUCTS + 1 - ALLOWANCE
    assert run["proxy_tier_bytes:datacenter"] > 1000 * (PRODUCTS + 1 - ALLOWANCE)  # the pages it carried

    wall(demo_site)  # the site relents; the host comes back down once the datacenter tier's quiet period is over
    time.sleep(QUIET + 1.5)  # and the sessions' next look at the tier (TIER_RECHECK_SECONDS)
    more = [TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/{number}")
            for number in range(PRODUCTS + 1, PRODUCTS + 4)]
    crawl.push(source, *more)
    run_until_idle(crawl, source, timeout=30)
    assert wall_figures(demo_site)["served"] == {DIRECT: len(more)}
    (host,) = ProxyTiers(redis_client).hosts(source.name, ["direct", "datacenter"])
    assert (host.tier, host.moves_up, host.moves_down) == ("direct", 1, 1)
    assert records(mongo_server, worker_settings, source).count_documents({}) == PRODUCTS + len(more)
