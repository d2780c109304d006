"""The fetcher's hot-path caches (bench/crawl.py measured them): each keeps its defence and expires.

- robots.txt rules held in the process are answered without a thread hop or a Redis read, until they expire;
- an address verdict per host and port is reused for a while (refusals too), but not a failed resolution;
- the connected peer is checked once per kept-alive connection, on every new connection again, and a
  refused peer is never remembered as checked.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from harvester.redis_keys import robots_key
from harvester.scraping.fetching import addresses, robots
from harvester.scraping.fetching.addresses import AddressGuard, AddressRefused, parse_allowed_networks
from harvester.scraping.fetching.fetcher import Fetcher
from harvester.scraping.fetching.robots import RobotsCache
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source


# -- robots.txt in the process -------------------------------------------------------------------------
@pytest.mark.integration
def test_robots_rules_in_the_process_are_used_until_they_expire(redis_client, monkeypatch) -> None:
    origin = "http://shop.example"
    cache = RobotsCache(redis_client, cache_seconds=24 * 3600.0)
    fetched: list[str] = []

    async def fetch_robots(url: str) -> tuple[int | None, str]:
        fetched.append(url)
        return 200, "User-agent: *\nDisallow: /private/\n"

    async def allowed(path: str) -> bool:
        rules = await cache.rules(f"{origin}{path}", fetch_robots)
        return rules.allowed(f"{origin}{path}", "Harvester/1")

    assert asyncio.run(allowed("/a")) and not asyncio.run(allowed("/private/1"))
    assert fetched == [f"{origin}/robots.txt"]
    # Redis now says otherwise: the process keeps its own rules, answered on the loop (no thread, no Redis) ...
    redis_client.set(robots_key(origin), json.dumps({"status": 200, "text": "User-agent: *\nDisallow: /\n"}))

    async def no_thread(*args: object, **kwargs: object) -> object:
        raise AssertionError("rules held in the process went through a thread")

    with monkeypatch.context() as patched:
        patched.setattr(robots.asyncio, "to_thread", no_thread)
        assert asyncio.run(allowed("/a"))
    # ... until they expire; then Redis is read again (and robots.txt is not fetched again)
    cache._memory[origin] = (time.monotonic() - 1, cache._memory[origin][1])
    assert not asyncio.run(allowed("/a"))
    assert fetched == [f"{origin}/robots.txt"]


@pytest.mark.integration
def test_a_cold_robots_txt_is_looked_up_once_and_a_lookup_failing_for_its_own_request_is_not_the_others(
        redis_client) -> None:
    origin = "http://cold.example"
    cache = RobotsCache(redis_client, cache_seconds=24 * 3600.0)
    fetched: list[str] = []

    def fetcher(held: bool):
        async def fetch_robots(url: str) -> tuple[int | None, str]:
            fetched.append(url)
            await asyncio.sleep(0.05)
            if not held:  # the looking request's task went to another worker: its own failure
                raise RuntimeError("no longer held")
            return 200, "User-agent: *\nDisallow: /private/\n"
        return fetch_robots

    async def batch() -> list[object]:
        asks = [cache.rules(f"{origin}/{index}", fetcher(held=index != 0)) for index in range(6)]
        return await asyncio.gather(*asks, return_exceptions=True)

    answers = asyncio.run(batch())
    assert isinstance(answers[0], RuntimeError)  # the failing request hears its own failure ...
    assert all(getattr(answer, "origin", None) == origin for answer in answers[1:])  # ... the others the rules
    assert fetched == [f"{origin}/robots.txt"] * 2  # the failed lookup, then ONE more for the five who waited


@pytest.mark.integration
def test_screening_links_reads_each_origins_robots_txt_once_whether_or_not_redis_has_it(redis_client) -> None:
    """The follower and the planner screen many URLs of few origins: an origin whose robots.txt nobody fetched
    yet (a source's first run) was one Redis GET per URL, a planner chunk of 5,000 URLs 5,000 round trips."""
    cache = RobotsCache(redis_client, cache_seconds=24 * 3600.0)
    known = json.dumps({"status": 200, "text": "User-agent: *\nDisallow: /no/\n"})
    redis_client.set(robots_key("http://known.example"), known)
    urls = [f"http://cold.example/p/{index}" for index in range(200)] + \
        [f"http://known.example/{'no' if index % 2 else 'yes'}/{index}" for index in range(200)]
    redis_client.config_resetstat()
    kept, dropped = cache.filter_allowed(urls, "Harvester/1")
    assert dropped == 100 and len(kept) == 300
    assert redis_client.info("commandstats")["cmdstat_get"]["calls"] == 2  # one per origin


@pytest.mark.integration
def test_why_a_robots_txt_could_not_be_fetched_reaches_the_other_processes(redis_client) -> None:
    """A robots.txt that gave no answer is cached unavailable for a while; a process that reads that copy from
    Redis says why (the fetcher's reason), not "no answer"."""
    url = "http://down.example/page"

    async def refused(robots_url: str) -> tuple[int | None, str]:
        return None, "ConnectionRefusedError: [Errno 111] Connect call failed"

    async def never(robots_url: str) -> tuple[int | None, str]:
        raise AssertionError("the other process fetched robots.txt again")

    first = asyncio.run(RobotsCache(redis_client, cache_seconds=3600.0).rules(url, refused))
    other = asyncio.run(RobotsCache(redis_client, cache_seconds=3600.0).rules(url, never))
    assert first.unavailable and other.unavailable
    assert other.failure == first.failure == "ConnectionRefusedError: [Errno 111] Connect call failed"


# -- address verdicts per host and port ----------------------------------------------------------------
class CountingGuard(AddressGuard):
    """The real guard, counting how often it resolves a host and port."""

    def __init__(self, allowed: str) -> None:
        super().__init__(parse_allowed_networks(allowed))
        self.resolutions: list[tuple[str, int]] = []

    async def _resolved_refusal(self, host: str, port: int) -> tuple[str | None, bool]:
        self.resolutions.append((host, port))
        return await super()._resolved_refusal(host, port)


@pytest.mark.unit
def test_address_verdicts_are_remembered_per_host_and_port_and_expire(monkeypatch) -> None:
    guard = CountingGuard("127.0.0.1/32:8008")

    async def run(remember: bool = True) -> None:
        for path in ("/a", "/b", "/c"):
            await guard.check(f"http://127.0.0.1:8008{path}", remember)
            with pytest.raises(AddressRefused, match="loopback"):  # a remembered refusal still refuses
                await guard.check(f"http://127.0.0.1:6379{path}", remember)
            with pytest.raises(AddressRefused, match="link-local"):
                await guard.check(f"http://169.254.169.254{path}", remember)

    asyncio.run(run())
    assert sorted(guard.resolutions) == [("127.0.0.1", 6379), ("127.0.0.1", 8008), ("169.254.169.254", 80)]
    asyncio.run(run(remember=False))  # the browser's route (no peer check) resolves every time
    assert len(guard.resolutions) == 3 + 9
    monkeypatch.setattr(addresses, "RESOLUTION_MEMORY_SECONDS", 0.0)  # expired: resolved again
    asyncio.run(run())
    assert len(guard.resolutions) == 3 + 9 + 9


@pytest.mark.unit
def test_a_name_that_did_not_resolve_is_asked_again() -> None:
    class Unresolvable(CountingGuard):
        async def _resolved_refusal(self, host: str, port: int) -> tuple[str | None, bool]:
            self.resolutions.append((host, port))
            return None, False  # what a gaierror gives: not refused, not remembered

    guard = Unresolvable("")
    for _ in range(2):
        asyncio.run(guard.check("http://not-yet.example/", remember=True))
    assert guard.resolutions == [("not-yet.example", 80)] * 2


# -- the connected peer, once per connection -----------------------------------------------------------
class PeerCountingGuard(AddressGuard):
    def __init__(self, allowed: str, refuse_peers: bool = False) -> None:
        super().__init__(parse_allowed_networks(allowed))
        self.peer_checks = 0
        self.refuse_peers = refuse_peers

    def check_peer(self, peer: object, port: int) -> None:
        self.peer_checks += 1
        if self.refuse_peers:
            raise AddressRefused("connected to a refused peer (test)")
        super().check_peer(peer, port)


@pytest.mark.integration
def test_the_peer_is_checked_once_per_connection(demo_site) -> None:
    source = demo_source(demo_site.url, robots="ignore", timeout=10)
    guard = PeerCountingGuard(f"127.0.0.1/32:{demo_site.port}")

    async def sequentially() -> None:
        async with Fetcher(HarvesterSettings(), guard=guard) as fetcher:
            for number in range(1, 6):
                assert (await fetcher.fetch(f"{demo_site.url}/product/{number}", source)).ok

    asyncio.run(sequentially())
    assert guard.peer_checks == 1  # one kept-alive connection, five responses
    asyncio.run(sequentially())  # a new client: new connections are checked again
    assert guard.peer_checks == 2


@pytest.mark.integration
def test_a_refused_peer_is_refused_on_every_request(demo_site) -> None:
    source = demo_source(demo_site.url, robots="ignore", timeout=10)
    guard = PeerCountingGuard(f"127.0.0.1/32:{demo_site.port}", refuse_peers=True)

    async def run() -> list[str]:
        async with Fetcher(HarvesterSettings(), guard=guard) as fetcher:
            return [(await fetcher.fetch(f"{demo_site.url}/product/{number}", source)).outcome
                    for number in range(1, 4)]

    assert asyncio.run(run()) == ["refused"] * 3
    assert guard.peer_checks == 3
