"""Sessions of a source with proxy tiers (harvester.scraping.fetching.sessions over
harvester.pageslots.proxy_pool.CountryExits and proxy_tiers), against real Redis: a session on the direct tier goes
out from the worker's own address, a block moves the host's next session up to the next tier's pool, another
worker's sessions follow the move, and a tier whose pool has no connection says which connection is missing."""

from __future__ import annotations

import asyncio

import pytest
from harvester.config import SourceConfig
from harvester.connections import open_redis_client
from harvester.errors import StorageError, StorageUnavailableError
from harvester.pageslots import CountryExits
from harvester.scraping.fetching import NO_POOL_EXIT, AddressGuard, Fetcher, Sessions
from harvester.scraping.fetching.sessions import TIER_RECHECK_SECONDS

from tests.fixtures.demo_site import demo_source_document

pytestmark = pytest.mark.integration


def tiered(name: str, tiers: list[str]) -> SourceConfig:
    return SourceConfig.model_validate(demo_source_document(
        "http://shop.example", name, country="SG", proxy={"tiers": tiers, "quiet": "60s"}))


def test_a_block_on_the_direct_tier_moves_the_hosts_next_session_to_the_next_tier_for_every_worker(
        redis_client, worker_settings, monkeypatch) -> None:
    """Choosing an exit opens no connection, so the tier's proxy need not answer here."""
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_DATACENTER", "http://127.0.0.1:9")
    source = tiered("tier_sessions", ["direct", "datacenter"])

    async def scenario() -> None:
        guard = AddressGuard.from_settings(worker_settings)
        exits, other_exits = CountryExits(guard, redis_client), CountryExits(guard, redis_client)
        sessions, other_worker = Sessions(exits), Sessions(other_exits)
        try:
            direct = await sessions.of(source, "http://shop.example/a")
            assert (direct.tier, direct.exit.url) == ("direct", "")  # the worker's own address
            assert (await other_worker.of(source, "http://shop.example/b")).tier == "direct"
            assert await sessions.blocked(direct.key, "HTTP 403") is True  # rotated: the host moved up
            up = await sessions.of(source, "http://shop.example/c")
            assert up is not direct and up.tier == "datacenter" and up.exit.name == "proxy_sg_datacenter"
            assert up.exit.url.startswith("http://127.0.0.1:")  # the tier pool's guard listener
            await asyncio.sleep(TIER_RECHECK_SECONDS + 0.1)
            followed = await other_worker.of(source, "http://shop.example/d")  # its direct session retires
            assert followed.tier == "datacenter" and other_worker.tier_moves == 1
            assert (await sessions.of(source, "http://cdn.example/x")).tier == "direct"  # per host
        finally:
            await exits.aclose()
            await other_exits.aclose()

    asyncio.run(scenario())


def test_a_tier_whose_pool_has_no_connection_ends_its_requests_proxy_error_naming_it(
        redis_client, worker_settings, monkeypatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_PROXY_SG_RESIDENTIAL", raising=False)
    source = tiered("tier_missing", ["datacenter", "residential"])
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_DATACENTER", "http://127.0.0.1:9")

    async def scenario() -> None:
        exits = CountryExits(AddressGuard.from_settings(worker_settings), redis_client)
        fetcher = Fetcher.from_settings(worker_settings, exits=exits)
        try:
            first = await fetcher.sessions.of(source, "http://shop.example/a")
            await fetcher.sessions.blocked(first.key, "HTTP 403")
            session = await fetcher.sessions.of(source, "http://shop.example/b")
            assert session.tier == "residential" and session.exit.url.startswith(NO_POOL_EXIT)
            source_ignoring_robots = source.model_copy(update={"robots": "ignore"})
            result = await fetcher.fetch("http://shop.example/b", source_ignoring_robots)
            assert result.outcome == "proxy_error" and "proxy_sg_residential" in result.reason, result
        finally:
            await fetcher.aclose()
            await exits.aclose()

    asyncio.run(scenario())


def test_redis_down_while_choosing_a_hosts_tier_fails_the_batch_as_a_storage_error_not_the_page(
        worker_settings, monkeypatch) -> None:
    """The tiers live in Redis: when it does not answer, the fetch raises the worker's StorageError (its batch goes
    back and is retried), never a redis-py error the fetcher would read as the site's fault (a page error)."""
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_DATACENTER", "http://127.0.0.1:9")
    source = tiered("tier_redis_down", ["direct", "datacenter"]).model_copy(update={"robots": "ignore"})
    closed = open_redis_client("redis://127.0.0.1:1/0", socket_connect_timeout=1)  # nothing listens on port 1

    async def scenario() -> None:
        exits = CountryExits(AddressGuard.from_settings(worker_settings), closed)
        fetcher = Fetcher.from_settings(worker_settings, exits=exits)
        try:
            with pytest.raises(StorageUnavailableError):
                await fetcher.sessions.of(source, "http://shop.example/a")
            with pytest.raises(StorageError):  # FetchResult(parse_error) before: the page, not the batch, failed
                await fetcher.fetch("http://shop.example/a", source)
            with pytest.raises(StorageUnavailableError):  # a block's ban and tier move: the same boundary
                await exits.tier_blocked(source.name, "shop.example", "direct", ["direct", "datacenter"], 60.0)
        finally:
            await fetcher.aclose()
            await exits.aclose()

    asyncio.run(scenario())
