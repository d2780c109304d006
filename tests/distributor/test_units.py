"""Pure logic of the distributor: backoff, host keys, fair order. No server."""

from __future__ import annotations

import pytest
from harvester.distributor import RetryPolicy
from harvester.distributor.hosts import host_of
from harvester.distributor.registry import RegisteredSource
from harvester.distributor.scripts import CONTRACTS
from harvester.distributor.service import Distributor
from harvester.redis_keys import SourceKeys

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


def test_a_contract_builds_keys_and_argv_by_name_and_decodes_replies_by_name():
    admit = CONTRACTS["admit"]
    keys = SourceKeys("shop")
    assert admit.key_names("shop")[:3] == [keys.intake, keys.active, keys.active_messages]  # due retries: promote_due
    assert admit.key_names("shop")[-3:] == [keys.host_parked, keys.host_next_admission, keys.lent_places]
    assert admit.argument_values({"wanted": 5, "publish_grace_seconds": 30, "window_seconds": 60, "now": "",
                                  "expected_source": "shop", "dead_letters_max": 9,
                                  "host_queue_prefix": keys.host_queue_prefix, "park_limit": 7,
                                  "beside_others": "0"}) == [5, 30, 60, "", "shop", 9, keys.host_queue_prefix, 7, "0"]
    with pytest.raises(TypeError, match="expected"):
        admit.argument_values({"wanted": 5})
    reply = admit.decode([b"ok", b"-1", 3, 0, b"12.5", 2, 41, b'{"a": 1}', b'{"b": 2}'])
    assert (reply.status, reply.wait_seconds, reply.pending, reply.now, reply.active) == ("ok", -1.0, 3, 12.5, 2)
    assert reply.first_token == 41
    assert reply.messages == ['{"a": 1}', '{"b": 2}']
    heartbeat = CONTRACTS["heartbeat"]
    assert heartbeat.argument_values({"lease_seconds": 9, "now": "", "leases": ["a", "7"]}) == [9, "", "a", "7"]
    assert heartbeat.decode([b"a", b"b"]).held == ["a", "b"]
    pause = CONTRACTS["pause"]
    assert pause.key_names("shop", {"paused": keys.host_paused}) == [keys.host_paused]
    with pytest.raises(TypeError, match="explicit keys"):
        pause.key_names("shop")


def test_a_contract_on_another_key_space_takes_its_key_object_not_a_source_name():
    from harvester.pageslots.scripts import CONTRACTS as PAGE_SLOT_CONTRACTS
    from harvester.redis_keys import PageSlotKeys

    page_slot_keys = PageSlotKeys()
    transition = PAGE_SLOT_CONTRACTS["slot_transition"]
    assert transition.key_names(page_slot_keys, {"slot": page_slot_keys.slot("SG-1")}) == [
        page_slot_keys.slot("SG-1"), page_slot_keys.all_slots]
    with pytest.raises(TypeError, match="PageSlotKeys expected"):
        transition.key_names(SourceKeys("shop"), {"slot": page_slot_keys.slot("SG-1")})
    reply = PAGE_SLOT_CONTRACTS["slot_heartbeat"].decode([b"ok", b"PAGE_READY", b"SG", b"0", b""])
    assert (reply.status, reply.state, reply.country, reply.retire, reply.next_country) == (
        "ok", "PAGE_READY", "SG", "0", "")
