"""The batch's per_minute tokens on the real fetch path (robots.txt, the host gate, then the permit, last):
the pages of one batch still reach the permit together and share its calls."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping.fetching.fetcher import Fetcher
from harvester.workers.heartbeat import LeaseHeartbeat, RateTokenPermit

from tests.distributor.helpers import hold_started_leases

pytestmark = pytest.mark.integration

PAGES = 8


@pytest.mark.parametrize("robots", ["obey", "ignore"])
def test_a_batch_fetched_by_the_fetcher_takes_its_tokens_in_one_call(write_source, worker_settings, demo_site,
                                                                     redis_client, robots) -> None:
    source = write_source(robots=robots, rate_limit={"max_active": 100, "per_minute": 1000})
    urls = [f"{demo_site.url}/product/{index}" for index in range(1, PAGES + 1)]
    Intake(redis_client, worker_settings).push(source, [TaskMessage(source=source.name, url=url) for url in urls])
    store = RateLimitStore(redis_client, worker_settings)
    task_ids = [f"task-{index}" for index in range(PAGES)]

    def permit() -> RateTokenPermit:
        heartbeat = LeaseHeartbeat(store, source.name, hold_started_leases(redis_client, source.name, task_ids),
                                   interval=60)
        return RateTokenPermit(store, source.name, task_ids, heartbeat)

    async def two_batches() -> tuple[RateTokenPermit, RateTokenPermit, list[str]]:
        first, second = permit(), permit()
        async with Fetcher.from_settings(worker_settings) as fetcher:
            outcomes = [result.outcome for result in (await fetcher.fetch_all(urls, source, first)).results]
            outcomes += [result.outcome for result in (await fetcher.fetch_all(urls, source, second)).results]
        return first, second, outcomes

    first, second, outcomes = asyncio.run(two_batches())

    assert outcomes == ["ok"] * 2 * PAGES
    robots_fetches = 1 if robots == "obey" else 0  # robots.txt is a request at the site: it takes a token too
    assert int(redis_client.hget(SourceKeys(source.name).counters, "fetch_starts")) == 2 * PAGES + robots_fetches
    # a cold robots.txt is looked up once while the pages wait: its fetch asks alone, then the pages, woken
    # together, ask in one call
    assert first.token_calls == (2 if robots == "obey" else 1)
    assert second.token_calls == 1  # robots.txt known: the whole batch asks in one loop turn


def one_redirecting_task(write_source, worker_settings, demo_site, redis_client, client: str, robots: str
                         ) -> tuple[Any, str, LeaseHeartbeat, RateTokenPermit]:
    """A source (counted at the demo site as ``client``) with one registered task on a page behind three
    redirects, and the permit of a batch holding it: (source, url, heartbeat, permit)."""
    source = write_source(robots=robots, rate_limit={"max_active": 100, "per_minute": 1000},
                          headers={"X-Demo-Client": client})
    url = f"{demo_site.url}/redirect/3"
    Intake(redis_client, worker_settings).push(source, [TaskMessage(source=source.name, url=url)])  # registers it
    store = RateLimitStore(redis_client, worker_settings)
    heartbeat = LeaseHeartbeat(store, source.name, hold_started_leases(redis_client, source.name, ["task-0"]),
                               interval=60)
    return source, url, heartbeat, RateTokenPermit(store, source.name, ["task-0"], heartbeat)


@pytest.mark.parametrize("robots", ["obey", "ignore"])
def test_every_request_a_page_costs_the_site_takes_a_token(write_source, worker_settings, demo_site, redis_client,
                                                          robots) -> None:
    """A page behind three redirects is four requests at the site (five with its robots.txt): per_minute
    counts every one, so a redirecting site cannot be sent more starts than per_minute allows."""
    client = f"redirects_{robots}"
    source, url, _, permit = one_redirecting_task(write_source, worker_settings, demo_site, redis_client, client,
                                                  robots)

    async def fetch() -> str:
        async with Fetcher.from_settings(worker_settings) as fetcher:
            return (await fetcher.fetch_all([url], source, permit)).results[0].outcome

    assert asyncio.run(fetch()) == "ok"
    seen = demo_site.stats()["clients"][client]
    assert seen["total"] == 4  # the three hops and the page (robots.txt is counted apart)
    seen_by_site = seen["total"] + seen.get("robots", 0)
    assert int(redis_client.hget(SourceKeys(source.name).counters, "fetch_starts")) == seen_by_site


def test_a_task_lost_between_redirect_hops_sends_no_further_request(write_source, worker_settings, demo_site,
                                                                    redis_client) -> None:
    client = "redirects_lost"
    source, url, heartbeat, permit = one_redirecting_task(write_source, worker_settings, demo_site, redis_client,
                                                          client, "ignore")
    asks = 0

    async def ready() -> bool:  # the lease is lost after the first request: a reaper handed the task on
        nonlocal asks
        asks += 1
        if asks > 1:
            heartbeat.held.discard("task-0")
        return await permit(0)

    async def fetch() -> str:
        async with Fetcher.from_settings(worker_settings) as fetcher:
            return (await fetcher.fetch(url, source, ready)).outcome

    assert asyncio.run(fetch()) == "skipped"
    assert demo_site.stats()["clients"][client]["total"] == 1
    assert int(redis_client.hget(SourceKeys(source.name).counters, "fetch_starts")) == 1


@pytest.mark.parametrize("lease", ["reaped", "expired"])
def test_a_task_whose_lease_is_gone_before_its_request_is_not_fetched(write_source, worker_settings, demo_site,
                                                                      redis_client, lease) -> None:
    """The fault matrix's row 5 b with a Redis outage of three leases: the batch's heartbeats could not
    answer, its leases expired and the reaper handed the tasks on; the old holder's first token call came
    before any heartbeat told it, so it fetched beside the new holder (the site saw 8 in flight for
    max_active 4). The token call itself looks at the lease: a task reaped, or whose lease expired (the
    reaper may hand it on at any moment), gets no token, is not fetched and is no longer vouched for."""
    client = f"lease_{lease}"
    source = write_source(robots="ignore", rate_limit={"max_active": 100, "per_minute": 1000},
                          headers={"X-Demo-Client": client})
    url = f"{demo_site.url}/product/1"
    Intake(redis_client, worker_settings).push(source, [TaskMessage(source=source.name, url=url)])
    store = RateLimitStore(redis_client, worker_settings)
    task = store.admit(source.name, 1).task_messages()[0]
    leases = {task.task_id: str(task.lease_token)}
    server_now = float(redis_client.time()[0])
    if lease == "reaped":  # started now; then the reaper, its clock past the lease, hands the task back
        assert store.start(source.name, leases).held == [task.task_id]
        assert store.reap([source.name], now=server_now + 10 * worker_settings.lease_seconds).reaped == 1
    else:  # started a while ago, no heartbeat answered since: expired, not reaped yet
        started = server_now - 10 * worker_settings.lease_seconds
        assert store.start(source.name, leases, now=started).held == [task.task_id]
    heartbeat = LeaseHeartbeat(store, source.name, leases, interval=60)  # no beat came since (Redis was away)
    permit = RateTokenPermit(store, source.name, [task.task_id], heartbeat)

    async def fetch() -> list[str]:
        async with Fetcher.from_settings(worker_settings) as fetcher:
            return [result.outcome for result in (await fetcher.fetch_all([url], source, permit)).results]

    assert asyncio.run(fetch()) == ["skipped"]
    assert demo_site.stats()["clients"].get(client, {}).get("total", 0) == 0
    assert int(redis_client.hget(SourceKeys(source.name).counters, "fetch_starts") or 0) == 0
    assert heartbeat.held == set()  # a later beat must not revive the expired lease the batch gave up
    assert permit.token_calls == 1
