"""Pure logic of the distributor: backoff, host keys, fair order. No server."""

from __future__ import annotations

import pytest
from harvester.distributor import RetryPolicy
from harvester.distributor.hosts import host_of
from harvester.distributor.intake import RegisteredSource
from harvester.distributor.scripts import LUA_DIRECTORY, SCRIPT_NAMES, script_source
from harvester.distributor.service import Distributor

pytestmark = pytest.mark.unit


def test_backoff_doubles_then_caps_and_retry_after_wins():
    policy = RetryPolicy(base_seconds=2, max_seconds=30, jitter=0)
    assert [policy.delay(attempt) for attempt in range(6)] == [2, 4, 8, 16, 30, 30]
    assert policy.delay(0, retry_after=120) == 120  # the server knows better than our backoff
    assert policy.delay(3, retry_after=-5) == 0
    jittered = RetryPolicy(base_seconds=10, max_seconds=1000, jitter=0.1)
    assert all(10 <= jittered.delay(0) <= 11 for _ in range(50))


@pytest.mark.parametrize(("url", "host"), [
    ("https://Example.COM/a?b#c", "example.com"),
    ("http://user:pw@shop.test:8080/x", "shop.test:8080"),
    ("http://127.0.0.1:8008", "127.0.0.1:8008"),
    ("mailto:someone@example.com", ""),
    ("/relative/path", ""),
])
def test_host_of_matches_the_lua_rule(url: str, host: str):
    assert host_of(url) == host


def source(name: str, priority: str = "normal") -> RegisteredSource:
    return RegisteredSource(name=name, queue="default", priority=priority, max_active=1, per_minute=1,
                            per_host_max_active=0, retries=3)


def test_fair_order_puts_high_priority_first_and_rotates_inside_each_tier():
    sources = [source("a"), source("b"), source("c"), source("x", "high"), source("y", "high")]
    orders = [[s.name for s in Distributor.fair_order(sources, round_number)] for round_number in range(3)]
    assert orders == [["x", "y", "a", "b", "c"], ["y", "x", "b", "c", "a"], ["x", "y", "c", "a", "b"]]


def test_every_script_has_a_header_naming_its_keys_and_units():
    for name in SCRIPT_NAMES:
        own = (LUA_DIRECTORY / f"{name}.lua").read_text()
        header = "\n".join(line for line in own.splitlines() if line.startswith("--"))
        assert own.startswith(f"-- {name}"), name
        assert "KEYS[1]" in header and ("(s)" in header or "(count" in header or "no times" in header), name
        assert script_source(name).startswith("-- Shared helpers")
