"""What a block page does beyond its own retry: the host's rate adapts for every worker (cut on a block, raised
slowly while pages come clean, never above the source's limits), repeated blocks pause the host, the source's
cookies for the host are dropped, and past the retries the dead letter names the marker. Real Redis."""

from __future__ import annotations

import asyncio
import time

import pytest
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping import FetchResult, HostLimits
from harvester.scraping.fetching.cookies import SourceCookieJars
from harvester.workers.failures import FailurePolicy
from harvester.workers.host_rate import HostRateGate
from harvester.workers.host_throttle import FLOOR_PER_MINUTE, RAISE_PER_CLEAN_PAGE, HostThrottle
from harvester.workers.report import BatchReport

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration
HOST = "shop.example:8080"


def started_requests(redis_client, source: str, count: int) -> None:
    """``count`` fetch starts of ``source`` in its rolling window, now (what acquire_fetch records)."""
    now = float(redis_client.time()[0])
    redis_client.zadd(SourceKeys(source).window, {f"start-{index}": now for index in range(count)})


def test_a_block_halves_the_hosts_rate_from_what_was_really_sent(redis_client) -> None:
    source = demo_source(f"http://{HOST}", "throttled", rate_limit={"max_active": 4, "per_minute": 1000})
    throttle = HostThrottle(redis_client, window_seconds=60, pause_after=100, pause_seconds=60)
    started_requests(redis_client, source.name, 40)  # 40 a minute were sent; the site challenged
    verdict = throttle.record(source, HOST, blocked=1, clean=0)
    assert verdict.rate_per_minute == 20.0 and not verdict.pause
    assert throttle.record(source, HOST, blocked=5, clean=0).rate_per_minute == 10.0  # one halving a batch
    for _ in range(5):
        verdict = throttle.record(source, HOST, blocked=1, clean=0)
    assert verdict.rate_per_minute == FLOOR_PER_MINUTE  # never below the floor
    raised = throttle.record(source, HOST, blocked=0, clean=10).rate_per_minute
    assert raised == pytest.approx(FLOOR_PER_MINUTE * RAISE_PER_CLEAN_PAGE ** 10, abs=0.001)
    assert throttle.record(source, "other.example", blocked=0, clean=5).rate_per_minute is None  # never slowed


def test_a_slowed_host_is_released_at_the_sources_own_limit(redis_client) -> None:
    source = demo_source(f"http://{HOST}", "relents", rate_limit={"max_active": 4, "per_minute": 100,
                                                                     "per_host_per_minute": 30})
    throttle = HostThrottle(redis_client, window_seconds=60, pause_after=100, pause_seconds=60)
    started_requests(redis_client, source.name, 500)  # more than the host's limit: the cut starts at the limit
    assert throttle.record(source, HOST, blocked=1, clean=0).rate_per_minute == 15.0
    assert throttle.record(source, HOST, blocked=0, clean=34).rate_per_minute == pytest.approx(
        15 * RAISE_PER_CLEAN_PAGE ** 34, abs=0.001)
    assert throttle.record(source, HOST, blocked=0, clean=2).rate_per_minute is None  # past 30: not slowed
    assert redis_client.hget(SourceKeys(source.name).host_throttles, HOST) is None


def test_a_slowed_host_recovers_with_quiet_time_not_only_with_clean_pages(redis_client) -> None:
    """A host slowed by blocks and then left alone (the run ended, the next is tomorrow) must not start its next
    run slowed: its rate doubles every ``recovery_seconds`` without a block, for every worker's reading."""
    source = demo_source(f"http://{HOST}", "quiet", rate_limit={"max_active": 4, "per_minute": 1000})
    throttle = HostThrottle(redis_client, window_seconds=60, pause_after=100, pause_seconds=60, recovery_seconds=0.5)
    started_requests(redis_client, source.name, 40)
    assert throttle.record(source, HOST, blocked=1, clean=0).rate_per_minute == 20.0
    time.sleep(1.1)  # two recovery periods and a little: 20 -> 80 a minute and a little
    reader = HostThrottle(redis_client, window_seconds=60, pause_after=100, pause_seconds=60, recovery_seconds=0.5)
    assert reader.known_rate(source.name, HOST) == pytest.approx(80.0 * 2 ** (0.1 / 0.5), rel=0.25)
    recovered = throttle.record(source, HOST, blocked=0, clean=1).rate_per_minute
    assert recovered is not None and recovered > 80.0  # what the worker records starts from the recovered rate
    assert throttle.record(source, HOST, blocked=1, clean=0).rate_per_minute == pytest.approx(recovered / 2, rel=0.1)
    time.sleep(3.5)  # seven periods: past the source's own 1000 a minute, the host is no longer slowed
    assert throttle.record(source, HOST, blocked=0, clean=1).rate_per_minute is None
    assert redis_client.hget(SourceKeys(source.name).host_throttles, HOST) is None


def test_repeated_blocks_within_the_window_pause_the_host_for_every_worker(redis_client, configure_settings) -> None:
    settings = configure_settings(block_pause_after=3, block_pause_seconds=30)
    source = demo_source(f"http://{HOST}", "walled")
    throttle = HostThrottle.from_settings(settings, redis_client)
    assert [throttle.record(source, HOST, 1, 0).pause for _ in range(3)] == [False, False, True]
    assert throttle.record(source, HOST, 1, 0).blocks_in_window == 1  # counted afresh after a pause
    store = RateLimitStore(redis_client, settings)
    before = time.time()
    policy = FailurePolicy(store, packages=lambda: None)  # type: ignore[arg-type]  # no run: no package
    with policy.deferred():
        policy.pause_hosts(source, [HOST], 30.0)
    keys = SourceKeys(source.name)
    assert float(redis_client.hget(keys.host_paused, HOST)) >= before + 29
    assert float(redis_client.get(keys.paused_until)) >= before + 29  # its one host: the whole source waits
    Intake(redis_client, settings).push(source, [TaskMessage(task_id="t1", source=source.name,
                                                             url=f"http://{HOST}/product/1")])
    assert store.admit(source.name, 1).status == "paused"


def test_the_gate_holds_a_slowed_host_to_its_rate_and_never_above_the_sources(redis_client, configure_settings):
    settings = configure_settings()
    source = demo_source(f"http://{HOST}", "gated", rate_limit={"max_active": 4, "per_minute": 1000})
    gate = HostRateGate.from_settings(settings, redis_client)
    url = f"http://{HOST}/product/1"
    assert asyncio.run(gate.acquire(source.name, url, HostLimits())) is None  # not limited, not slowed: no token
    started_requests(redis_client, source.name, 13)
    HostThrottle.from_settings(settings, redis_client).record(source, HOST, blocked=1, clean=0)  # 6.5 a minute
    gate.throttle._cache.clear()  # type: ignore[union-attr]  # read it now, not after REFRESH_SECONDS
    assert asyncio.run(gate.slowed(source.name, HOST, HostLimits())).per_minute == 6
    assert asyncio.run(gate.slowed(source.name, HOST, HostLimits(per_minute=4))).per_minute == 4
    assert asyncio.run(gate.slowed(source.name, "other.example", HostLimits())) == HostLimits()
    assert asyncio.run(gate.acquire(source.name, url, HostLimits())) is not None  # a token of the slowed host


def test_a_block_drops_the_sources_cookies_for_that_host_only() -> None:
    jars = SourceCookieJars()
    jars.store("shop", "http://www.shop.example/p/1", ["session=abc; Domain=shop.example; Path=/", "cart=1"])
    jars.store("shop", "http://other.example/", ["keep=1"])
    jars.store("another", "http://www.shop.example/", ["theirs=1"])
    assert jars.drop_host("shop", "www.shop.example") == 2
    assert jars.header("shop", "http://www.shop.example/p/2") is None
    assert jars.header("shop", "http://other.example/") == "keep=1"
    assert jars.header("another", "http://www.shop.example/") == "theirs=1"
    assert jars.drop_host("nobody", "www.shop.example") == 0


def test_past_its_retries_a_blocked_page_is_a_dead_letter_naming_the_marker(redis_client, configure_settings):
    settings = configure_settings(retry_base_seconds=0.05, retry_max_seconds=0.1)
    source = demo_source(f"http://{HOST}", "dead_block", retries=0)
    Intake(redis_client, settings).push(source, [TaskMessage(task_id="t1", source=source.name,
                                                             url=f"http://{HOST}/product/1")])
    store = RateLimitStore(redis_client, settings)
    (message,) = store.admit(source.name, 1).task_messages()
    report = BatchReport(source.name)
    blocked = FetchResult(message.url, "blocked", status=200,
                          reason="block page: built-in Cloudflare challenge (title 'Just a moment...')")
    FailurePolicy(store, packages=lambda: None).fetch_failed(source, message, blocked, report)  # type: ignore[arg-type]
    (letter,) = DeadLetters(redis_client).list(source.name)
    assert letter.reason == "blocked: block page: built-in Cloudflare challenge (title 'Just a moment...')"


def test_a_browser_request_to_a_slowed_host_takes_the_hosts_turn(redis_client, configure_settings) -> None:
    """A source with no host limit: its page slots' requests take no host token, until blocks slow the host."""
    from harvester.distributor import SourceRegistry
    from harvester.workers.slot_pipeline import SiteRequestCharger

    settings = configure_settings()
    source = demo_source(f"http://{HOST}", "slowed_browser", rate_limit={"max_active": 4, "per_minute": 1000})
    SourceRegistry(redis_client).register(source)
    window = SourceKeys(source.name).host_fetch_window(HOST)
    charger = SiteRequestCharger(RateLimitStore(redis_client, settings), HostRateGate.from_settings(settings,
                                                                                                    redis_client),
                                 source)
    asyncio.run(charger.charge(f"http://{HOST}/product/1"))
    assert redis_client.zcard(window) == 0  # not limited, not slowed: no host token
    HostThrottle.from_settings(settings, redis_client).record(source, HOST, blocked=1, clean=0)
    charger.gate.throttle._cache.clear()  # type: ignore[union-attr]  # read it now, not after REFRESH_SECONDS
    asyncio.run(charger.charge(f"http://{HOST}/product/2"))
    assert redis_client.zcard(window) == 1 and charger.charged == 2
