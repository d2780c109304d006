"""per_minute tokens for a batch's requests, coalesced: the pages that ask in one event-loop turn share one
``acquire_fetch.lua`` call (one thread hop, one Redis round trip), against a real redis-server."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings
from harvester.workers.heartbeat import GATE_OUTAGE_SECONDS, LeaseHeartbeat, RateTokenPermit

from tests.distributor.conftest import make_source
from tests.distributor.helpers import hold_started_leases

pytestmark = pytest.mark.integration

PAGES = 8  # a worker batch's pages, fetched concurrently


def configure(client: redis.Redis, settings: HarvesterSettings, per_minute: int) -> RateLimitStore:
    source = make_source("shop", rate_limit={"max_active": 100, "per_minute": per_minute})
    Intake(client, settings).push(source, [TaskMessage(source="shop", url=f"http://shop.test/{i}")
                                           for i in range(PAGES)])
    store = RateLimitStore(client, settings)
    store.scripts.load_all()  # a fresh server's first EVALSHA would add a NOSCRIPT retry to the count
    return store


def permit_for(store: RateLimitStore, held: set[str] | None = None) -> RateTokenPermit:
    """A permit over PAGES tasks; the heartbeat is never started, so ``held`` stays what the test sets."""
    task_ids = [f"task-{index}" for index in range(PAGES)]
    heartbeat = LeaseHeartbeat(store, "shop", hold_started_leases(store.redis, "shop", task_ids), interval=60)
    if held is not None:
        heartbeat.held = held
    return RateTokenPermit(store, "shop", task_ids, heartbeat)


async def ask_all(permit: RateTokenPermit) -> list[tuple[bool, float]]:
    """What Fetcher.fetch_all does: every page asks at once; (answer, monotonic time it came) per page."""
    async def ask(index: int) -> tuple[bool, float]:
        answer = await permit(index)
        return answer, time.monotonic()

    return list(await asyncio.gather(*(ask(index) for index in range(PAGES))))


def script_calls(client: redis.Redis) -> int:
    """EVALSHA calls the server has run so far (every script call of the store is one)."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def window_members(client: redis.Redis) -> dict[str, float]:
    return {member.decode(): score for member, score in client.zrange(SourceKeys("shop").window, 0, -1,
                                                                       withscores=True)}


def fetch_starts(client: redis.Redis) -> int:
    return int(client.hget(SourceKeys("shop").counters, "fetch_starts") or 0)


def test_acquire_fetches_takes_what_the_window_has_room_for(redis_client: redis.Redis,
                                                            settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=5)
    window = settings.rate_window_seconds + settings.rate_window_margin_seconds
    now = store.server_time()

    first = store.acquire_fetches("shop", 8, now=now)
    assert first.granted == 5
    assert first.wait_seconds == pytest.approx(window, abs=1e-3)
    assert window_members(redis_client) == {str(sequence): now for sequence in range(1, 6)}  # one member each
    assert fetch_starts(redis_client) == 5
    later = store.acquire_fetches("shop", 3, now=now + 0.5)
    assert (later.granted, later.wait_seconds) == (0, pytest.approx(window - 0.5, abs=1e-3))
    assert store.acquire_fetch("shop", now=now + 0.5) == pytest.approx(window - 0.5, abs=1e-3)
    after = store.acquire_fetches("shop", 3, now=now + window + 0.01)
    assert (after.granted, after.wait_seconds) == (3, 0.0)
    assert set(window_members(redis_client)) == {"6", "7", "8"}
    with pytest.raises(ValueError):
        store.acquire_fetches("shop", 0)


def test_a_lowered_per_minute_waits_for_the_member_that_makes_room(redis_client: redis.Redis,
                                                                   settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=5)
    window = settings.rate_window_seconds + settings.rate_window_margin_seconds
    now = store.server_time()
    assert store.acquire_fetches("shop", 3, now=now).granted == 3
    assert store.acquire_fetches("shop", 2, now=now + 0.5).granted == 2
    redis_client.hset(SourceKeys("shop").config, "per_minute", 2)  # 5 in the window: room once 4 have left
    lowered = store.acquire_fetches("shop", 1, now=now + 1.0)
    assert (lowered.granted, lowered.wait_seconds) == (0, pytest.approx(window - 0.5, abs=1e-3))


def test_a_batch_asking_at_once_makes_one_script_call(redis_client: redis.Redis, settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=1000)
    permit = permit_for(store)
    before = script_calls(redis_client)

    answers = asyncio.run(ask_all(permit))

    assert [answer for answer, _ in answers] == [True] * PAGES
    assert script_calls(redis_client) - before == 1  # not one round trip per page
    assert permit.token_calls == 1
    assert len(window_members(redis_client)) == PAGES and fetch_starts(redis_client) == PAGES
    assert len(set(window_members(redis_client).values())) == 1  # taken in one atomic call


def test_with_per_minute_5_five_pages_start_now_and_three_when_the_window_has_room(
        redis_client: redis.Redis, settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=5)
    window = settings.rate_window_seconds + settings.rate_window_margin_seconds
    permit = permit_for(store)
    asked_at = store.server_time()

    answers = asyncio.run(ask_all(permit))

    assert [answer for answer, _ in answers] == [True] * PAGES
    first_five, last_three = [at for _, at in answers[:5]], [at for _, at in answers[5:]]
    assert max(first_five) < min(last_three)  # tokens go out in the order the pages asked
    assert min(last_three) - max(first_five) > window / 2  # they waited for the window, not for a retry
    # the first five left the window before the last three got theirs, all three in one call
    late = window_members(redis_client)
    assert set(late) == {"6", "7", "8"} and len(set(late.values())) == 1
    assert min(late.values()) >= asked_at + window
    assert fetch_starts(redis_client) == PAGES
    assert permit.waited_seconds >= 3 * window / 2
    assert 2 <= permit.token_calls <= 2 + window / 0.5  # polls at most every GATE_POLL_SECONDS, together


def test_a_task_no_longer_held_gets_false_and_takes_no_token(redis_client: redis.Redis,
                                                            settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=1000)
    held = {f"task-{index}" for index in range(PAGES)} - {"task-2"}
    permit = permit_for(store, held)
    before = script_calls(redis_client)

    answers = asyncio.run(ask_all(permit))

    assert [answer for answer, _ in answers] == [index != 2 for index in range(PAGES)]
    assert fetch_starts(redis_client) == PAGES - 1 and len(window_members(redis_client)) == PAGES - 1
    assert script_calls(redis_client) - before == 1


def test_a_task_lost_while_waiting_for_the_window_gets_false_and_takes_no_token(
        redis_client: redis.Redis, settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=5)
    permit = permit_for(store)

    async def lose_task_6_while_it_waits() -> list[tuple[bool, float]]:
        asking = asyncio.ensure_future(ask_all(permit))
        while permit.token_calls == 0 or permit.waited_seconds == 0:  # the first round handed out five
            await asyncio.sleep(0.01)
        permit.heartbeat.held = permit.heartbeat.held - {"task-6"}  # as a heartbeat that found it reaped
        return await asking

    answers = asyncio.run(lose_task_6_while_it_waits())

    assert [answer for answer, _ in answers] == [index != 6 for index in range(PAGES)]
    assert fetch_starts(redis_client) == PAGES - 1
    assert set(window_members(redis_client)) == {"6", "7"}  # two late tokens: pages 5 and 7


def test_redis_errors_mean_no_token_and_another_try_together(redis_client: redis.Redis,
                                                             settings: HarvesterSettings):
    store = configure(redis_client, settings, per_minute=1000)
    config = SourceKeys("shop").config
    redis_client.rename(config, "shop-config-aside")
    redis_client.set(config, "not a hash")  # every acquire_fetch now fails with WRONGTYPE, a RedisError
    permit = permit_for(store)

    async def mend_after_a_failed_round() -> list[tuple[bool, float]]:
        asking = asyncio.ensure_future(ask_all(permit))
        while permit.waited_seconds == 0:
            await asyncio.sleep(0.01)
        assert fetch_starts(redis_client) == 0 and not asking.done()  # no token, no request
        redis_client.rename("shop-config-aside", config)
        return await asking

    answers = asyncio.run(mend_after_a_failed_round())

    assert [answer for answer, _ in answers] == [True] * PAGES
    assert permit.waited_seconds == pytest.approx(PAGES * GATE_OUTAGE_SECONDS)
    assert permit.token_calls == 2 and fetch_starts(redis_client) == PAGES
