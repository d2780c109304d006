"""The batch's per_minute tokens on the real fetch path (robots.txt, the host gate, then the permit, last):
the pages of one batch still reach the permit together and share its calls."""

from __future__ import annotations

import asyncio

import pytest
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping.fetcher import Fetcher
from harvester.workers.heartbeat import LeaseHeartbeat, RateTokenPermit

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
        heartbeat = LeaseHeartbeat(store, source.name, dict.fromkeys(task_ids, "1"), interval=60)
        return RateTokenPermit(store, source.name, task_ids, heartbeat)

    async def two_batches() -> tuple[RateTokenPermit, RateTokenPermit, list[str]]:
        first, second = permit(), permit()
        async with Fetcher.from_settings(worker_settings) as fetcher:
            outcomes = [result.outcome for result in (await fetcher.fetch_all(urls, source, first)).results]
            outcomes += [result.outcome for result in (await fetcher.fetch_all(urls, source, second)).results]
        return first, second, outcomes

    first, second, outcomes = asyncio.run(two_batches())

    assert outcomes == ["ok"] * 2 * PAGES
    assert int(redis_client.hget(SourceKeys(source.name).counters, "fetch_starts")) == 2 * PAGES
    # a cold robots.txt lets the pages through its lock one by one: the first asks alone, the rest together
    assert first.token_calls <= (2 if robots == "obey" else 1)
    assert second.token_calls == 1  # robots.txt known: the whole batch asks in one loop turn
