"""The duplicate-URL checker: per-source keys expiring after the harvesting lag, one round trip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from harvester.storage.data_handler import DataHandler
from harvester.storage.url_store import RunFrontier, URLStore

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration


def test_one_round_trip_for_thousands(redis_client) -> None:
    source = demo_source("http://site", harvesting_lag="6h")
    store = URLStore(redis_client)
    urls = [f"http://site/p/{i}" for i in range(5000)]
    before = redis_client.info("stats")["total_commands_processed"]
    assert store.filter_new(source, urls, owner="t1") == urls
    commands = redis_client.info("stats")["total_commands_processed"] - before
    assert commands <= 5001 + 1  # the SETs in one pipeline, plus the INFO itself
    assert store.filter_new(source, urls, owner="t2") == []
    assert 6 * 3600 - 5 <= redis_client.ttl(URLStore.key(source.name, urls[0])) <= 6 * 3600


def test_sources_do_not_share_seen_urls(redis_client) -> None:
    store = URLStore(redis_client)
    one, two = demo_source("http://site", "one"), demo_source("http://site", "two")
    assert store.filter_new(one, ["http://site/a"]) == ["http://site/a"]
    assert store.filter_new(two, ["http://site/a"]) == ["http://site/a"]
    assert URLStore.key("one", "http://site/a").startswith("harvester:{one}:seen:")


def test_expiry_after_the_lag(redis_client) -> None:
    source = demo_source("http://site", harvesting_lag="1s")
    store = URLStore(redis_client)
    assert store.filter_new(source, ["http://site/a"], owner="x") == ["http://site/a"]
    assert store.filter_new(source, ["http://site/a"], owner="y") == []
    redis_client.pexpire(URLStore.key(source.name, "http://site/a"), 1)
    import time

    time.sleep(0.05)
    assert store.filter_new(source, ["http://site/a"], owner="y") == ["http://site/a"]


def test_mongo_output_is_the_authority_when_redis_forgot(redis_client, harvester_settings, mongo_server) -> None:
    source = demo_source("http://site")
    handler = DataHandler(harvester_settings, mongo_server.client())
    handler.write(source, [{"url": "http://site/recent"}])
    handler.write(source, [{"url": "http://site/old"}], now=datetime.now(UTC) - timedelta(days=3))
    redis_client.flushall()  # Redis lost its cache
    store = URLStore(redis_client)
    new = store.filter_new(source, ["http://site/recent", "http://site/old", "http://site/never"],
                           authority=handler.collection(source))
    assert new == ["http://site/old", "http://site/never"]


def test_forget_and_seen(redis_client) -> None:
    source = demo_source("http://site")
    store = URLStore(redis_client)
    store.filter_new(source, ["http://site/a", "http://site/b"])
    store.forget(source, ["http://site/b"])
    assert store.seen(source, ["http://site/a", "http://site/b"]) == {"http://site/a": True, "http://site/b": False}


def test_run_frontier_queues_listing_pages_once_and_caps_new_urls(redis_client) -> None:
    frontier = RunFrontier(redis_client)
    assert frontier.new_listing_pages("s", "r", ["p2", "p3"], owner="a") == ["p2", "p3"]
    assert frontier.new_listing_pages("s", "r", ["p2", "p4"], owner="b") == ["p4"]
    assert frontier.new_listing_pages("s", "r", ["p2"], owner="a") == ["p2"]  # a retry of a
    assert frontier.new_listing_pages("s", "other-run", ["p2"], owner="b") == ["p2"]
    assert frontier.reserve_new_urls("s", "r", 30, cap=50) == 30
    assert frontier.reserve_new_urls("s", "r", 30, cap=50) == 20
    assert frontier.reserve_new_urls("s", "r", 5, cap=50) == 0


def test_spellings_of_one_page_are_one_url(redis_client) -> None:
    """The checker canonicalises what it is given, with the same function as discovery and records."""
    source = demo_source("http://site", harvesting_lag="6h")
    store = URLStore(redis_client)
    assert store.filter_new(source, ["http://Site:80/a?utm_source=x#top", "http://site/a"], owner="t1") == [
        "http://site/a"]
    assert store.filter_new(source, ["HTTP://SITE/a#other"], owner="t2") == []
    assert store.seen(source, ["http://site/./a"]) == {"http://site/./a": True}
