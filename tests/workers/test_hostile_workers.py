"""The worker side of hostile sites, against real Redis: Retry-After clamped and applied to the
host that answered, discovered links to refused addresses and robots-disallowed paths dropped and
counted, and the per-host rate (per_host_per_minute, Crawl-delay) held at fetch time by host_fetch.lua."""

from __future__ import annotations

import asyncio
import time

import pytest
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping.discovery.links import Discovery
from harvester.scraping.fetching.addresses import AddressGuard, parse_allowed_networks
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.scraping.fetching.page_fetcher import HostLimits, HostRateTimeout
from harvester.scraping.fetching.robots import RobotsCache, RobotsRules
from harvester.scraping.page import PageResult
from harvester.settings import HarvesterSettings
from harvester.storage.data_handler import DataHandler
from harvester.storage.url_store import RunFrontier, URLStore
from harvester.workers.failures import FailurePolicy
from harvester.workers.follower import LinkFollower
from harvester.workers.host_rate import HostRateGate
from harvester.workers.report import BatchReport

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration


@pytest.mark.unit
@pytest.mark.parametrize("retry_after,source_cap,expected", [(99999.0, None, 3600.0), (500.0, 60.0, 60.0),
                                                             (None, None, 30.0), (7.0, None, 7.0)])
def test_retry_after_is_clamped_by_the_setting_and_the_source(retry_after, source_cap, expected) -> None:
    policy = FailurePolicy(store=None, packages=lambda: None, max_retry_after=3600.0)  # type: ignore[arg-type]
    source = demo_source("http://shop.example", max_retry_after=source_cap)
    decision = policy.decide(FetchResult("http://shop.example/1", "http_error", status=429, retry_after=retry_after),
                             source)
    assert decision.pause_seconds == expected == decision.retry_after


def admit_one(redis_client, settings, source, url: str) -> TaskMessage:
    Intake(redis_client, settings).push(source, [TaskMessage(task_id="t1", source=source.name, url=url)])
    (raw,) = RateLimitStore(redis_client, settings).admit(source.name, 1).messages
    return TaskMessage.from_json(raw)


def test_a_rate_limit_of_a_many_host_source_pauses_only_the_host_that_answered(redis_client,
                                                                                configure_settings) -> None:
    settings = configure_settings()
    source = demo_source("http://a.example", "many_hosts",
                         input={"seeds": ["http://a.example/shop", "http://b.example/shop"], "kind": "listing"})
    message = admit_one(redis_client, settings, source, "http://a.example/product/1")
    store = RateLimitStore(redis_client, settings)
    report = BatchReport(source.name)
    answered = FetchResult(message.url, "http_error", status=429, retry_after=99999.0,
                           final_url="http://c.example/product/1")
    FailurePolicy(store, packages=lambda: None, max_retry_after=120.0).fetch_failed(  # type: ignore[arg-type]
        source, message, answered, report)
    keys = SourceKeys(source.name)
    assert redis_client.get(keys.paused_until) is None  # the source goes on with its other hosts
    now = time.time()
    assert now + 100 < float(redis_client.hget(keys.host_paused, "c.example")) <= now + 121
    assert float(redis_client.hget(keys.host_paused, "a.example")) <= now + 121


def test_a_rate_limit_of_a_one_host_source_pauses_the_source(redis_client, configure_settings) -> None:
    settings = configure_settings()
    source = demo_source("http://a.example", "one_host")
    message = admit_one(redis_client, settings, source, "http://a.example/product/1")
    FailurePolicy(RateLimitStore(redis_client, settings), packages=lambda: None).fetch_failed(  # type: ignore[arg-type]
        source, message, FetchResult(message.url, "http_error", status=429, retry_after=5.0), BatchReport(source.name))
    assert float(redis_client.get(SourceKeys(source.name).paused_until)) > time.time() + 3


def test_discovered_links_to_refused_addresses_and_robots_disallowed_paths_are_dropped(redis_client,
                                                                                      configure_settings) -> None:
    settings = configure_settings(output_sink="discard")
    guard = AddressGuard(parse_allowed_networks("127.0.0.1/32"))
    robots = RobotsCache(redis_client, cache_seconds=24 * 3600.0)
    robots._remember(RobotsRules("http://127.0.0.1:8", "User-agent: *\nDisallow: /private/\n", 200))
    follower = LinkFollower(URLStore(redis_client), RunFrontier(redis_client), Intake(redis_client, settings),
                            DataHandler(settings), packages=lambda: None,  # type: ignore[arg-type,return-value]
                            refusals=lambda urls: asyncio.run(guard.refusals(urls)), robots=robots,
                            user_agent=settings.user_agent)
    source = demo_source("http://127.0.0.1:8", "screened")
    parent = TaskMessage(task_id="p", source=source.name, kind="listing", url="http://127.0.0.1:8/shop")
    details = ["http://127.0.0.1:8/product/1", "http://127.0.0.2:8/product/2", "http://169.254.169.254/latest/",
               "http://10.0.0.1/product/3", "http://[::1]/product/4", "http://127.0.0.1:8/private/5"]
    page = PageResult(FetchResult(parent.url, "ok", status=200), "listing", parent.url,
                      discovery=Discovery(details, ["http://192.168.1.1/shop?page=2"], {}))
    report = BatchReport(source.name)
    follower.follow(source, parent, page, report)
    queued = [TaskMessage.from_json(raw).url for raw in redis_client.lrange(SourceKeys(source.name).intake, 0, -1)]
    assert queued == ["http://127.0.0.1:8/product/1"]
    assert report.outcomes["links_ignored:address_refused"] == 5
    assert report.outcomes["links_ignored:robots_disallowed"] == 1


def test_per_host_per_minute_is_held_at_fetch_time_across_callers(redis_client) -> None:
    gate = HostRateGate(redis_client, window_seconds=2.0, max_wait_seconds=10.0, hold_seconds=120.0)
    limits = HostLimits(per_minute=3)

    async def start_six() -> list[float]:
        async def one() -> float:
            await gate.acquire("rated", "http://shop.example/p", limits)
            return time.monotonic()
        return sorted(await asyncio.gather(*(one() for _ in range(6))))

    started = time.monotonic()
    times = asyncio.run(start_six())
    assert times[2] - started < 1.5 and times[3] - started >= 1.8  # the fourth waits for the window
    key = SourceKeys("rated").host_fetch_window("shop.example")
    assert redis_client.zcard(key) <= 3 and 0 < redis_client.pttl(key) <= 3000


def test_the_host_window_of_http_fetches_keeps_the_rate_margin(redis_client) -> None:
    """A request reaches the site a little after its token: the host's window counts a start for
    rate_window_margin_seconds past the window, for HTTP fetches as for browser requests (only the slot
    pipeline widened it, at its own call)."""
    settings = HarvesterSettings(rate_window_seconds=1.0, rate_window_margin_seconds=5.0)
    gate = HostRateGate.from_settings(settings, redis_client)
    limits = HostLimits(per_minute=1)
    assert gate.try_acquire("margin", "shop.example", limits, "first") == 0
    time.sleep(1.3)  # past the window, within its margin
    assert gate.try_acquire("margin", "shop.example", limits, "second") > 3.0


def test_crawl_delay_spaces_request_starts_and_max_active_is_released(redis_client) -> None:
    gate = HostRateGate(redis_client, window_seconds=60.0, max_wait_seconds=0.5, hold_seconds=120.0)
    spaced = HostLimits(min_interval_seconds=0.4)

    async def two() -> list[float]:
        first = await gate.acquire("delayed", "http://shop.example/a", spaced)
        assert first is not None
        one = time.monotonic()
        await gate.acquire("delayed", "http://shop.example/b", spaced)
        return [one, time.monotonic()]

    one, other = asyncio.run(two())
    assert other - one >= 0.35
    single = HostLimits(max_in_flight=1)

    async def exclusive() -> None:
        token = await gate.acquire("exclusive", "http://shop.example/a", single)
        with pytest.raises(HostRateTimeout):
            await gate.acquire("exclusive", "http://shop.example/b", single)
        await gate.release(token)
        assert await gate.acquire("exclusive", "http://shop.example/c", single) is not None

    asyncio.run(exclusive())
