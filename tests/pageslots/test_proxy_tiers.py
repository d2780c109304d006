"""Each site host's proxy tier (harvester.pageslots.proxy_tiers) against real Redis, its clock Redis TIME: a host
starts on the cheapest tier, a block moves it up one, it comes back down once the tier below was quiet for the
source's quiet period, a block soon after coming down keeps it up twice as long, and blocks of pages that were in
flight when it moved change nothing. Two trackers (two workers) see the same tier."""

from __future__ import annotations

import time

import pytest
import redis
from harvester.pageslots.proxy_tiers import ProxyTiers, tier_pool
from harvester.redis_keys import PageSlotKeys

pytestmark = pytest.mark.integration
TIERS = ["direct", "datacenter", "residential"]
QUIET = 1.0  # s


def test_a_host_starts_on_the_cheapest_tier_and_a_quiet_host_writes_nothing(redis_client: redis.Redis) -> None:
    tiers = ProxyTiers(redis_client)
    assert tiers.tier_of("shop", "a.example", TIERS, QUIET) == ("direct", 0.0)
    assert redis_client.exists(PageSlotKeys().proxy_tiers("shop")) == 0


def test_a_block_moves_the_host_up_one_tier_for_every_worker_and_other_hosts_stay(redis_client: redis.Redis) -> None:
    worker, other_worker = ProxyTiers(redis_client), ProxyTiers(redis_client)
    tier, quiet_for = worker.blocked("shop", "a.example", "direct", TIERS, QUIET)
    assert tier == "datacenter" and 0 < quiet_for <= QUIET
    assert other_worker.tier_of("shop", "a.example", TIERS, QUIET)[0] == "datacenter"
    assert other_worker.tier_of("shop", "b.example", TIERS, QUIET)[0] == "direct"  # per host
    assert other_worker.tier_of("other", "a.example", TIERS, QUIET)[0] == "direct"  # per source
    assert worker.blocked("shop", "a.example", "datacenter", TIERS, QUIET)[0] == "residential"
    assert worker.blocked("shop", "a.example", "residential", TIERS, QUIET)[0] == "residential"  # the top stays
    (host,) = worker.hosts("shop", TIERS)
    assert (host.host, host.tier, host.moves_up, host.moves_down) == ("a.example", "residential", 2, 0)
    assert host.blocks == {"direct": 1, "datacenter": 1, "residential": 1}


def test_after_the_quiet_period_the_host_comes_back_down(redis_client: redis.Redis) -> None:
    tiers = ProxyTiers(redis_client)
    tiers.blocked("shop", "a.example", "direct", TIERS, QUIET)
    tier, down_in = tiers.tier_of("shop", "a.example", TIERS, QUIET)
    assert tier == "datacenter" and 0 < down_in <= QUIET
    time.sleep(QUIET + 0.05)
    assert tiers.tier_of("shop", "a.example", TIERS, QUIET) == ("direct", 0.0)
    (host,) = tiers.hosts("shop", TIERS)
    assert (host.moves_up, host.moves_down) == (1, 1)


def test_blocks_of_pages_in_flight_when_the_host_moved_change_nothing(redis_client: redis.Redis) -> None:
    tiers = ProxyTiers(redis_client)
    first = tiers.blocked("shop", "a.example", "direct", TIERS, 5.0)
    for _ in range(5):  # the rest of a batch that went out direct before the move
        assert tiers.blocked("shop", "a.example", "direct", TIERS, 5.0)[0] == "datacenter"
    assert tiers.tier_of("shop", "a.example", TIERS, 5.0)[1] <= first[1]  # not pushed further out
    (host,) = tiers.hosts("shop", TIERS)
    assert host.moves_up == 1 and host.blocks == {"direct": 6}


def test_a_block_soon_after_coming_down_keeps_the_tier_up_twice_as_long(redis_client: redis.Redis) -> None:
    tiers = ProxyTiers(redis_client)
    tiers.blocked("shop", "a.example", "direct", TIERS, QUIET)
    time.sleep(QUIET + 0.05)
    assert tiers.tier_of("shop", "a.example", TIERS, QUIET)[0] == "direct"
    tier, quiet_for = tiers.blocked("shop", "a.example", "direct", TIERS, QUIET)
    assert tier == "datacenter" and QUIET < quiet_for <= 2 * QUIET


def test_a_block_above_a_tier_still_blocked_goes_past_both(redis_client: redis.Redis) -> None:
    tiers = ProxyTiers(redis_client)
    tiers.blocked("shop", "a.example", "direct", TIERS, 5.0)
    assert tiers.blocked("shop", "a.example", "datacenter", TIERS, 5.0)[0] == "residential"


def test_a_tier_names_its_countrys_pool() -> None:
    assert tier_pool("SG", "residential") == "SG_RESIDENTIAL"  # the connections proxy_sg_residential, _2, ...
