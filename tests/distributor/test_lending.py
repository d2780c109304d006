"""A slow request lends its source's ``max_active`` place back (``lua/lend_places.lua``, harvester.distributor.lending)
against a real redis-server: admission starts another task in it, the slow request's host keeps its place, a place
is lent once and comes back with its lease whatever ends it, and a source without a per-host limit lends nothing."""

from __future__ import annotations

import pytest
import redis
from harvester.distributor import Intake, PlaceLending, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import admit_and_start, leases_of

pytestmark = pytest.mark.integration

BROAD_LIMITS = {"max_active": 2, "per_minute": 10_000, "per_host_max_active": 1}


def _push(redis_client: redis.Redis, settings: HarvesterSettings, limits: dict[str, int],
          *hosts: str) -> RateLimitStore:
    source = make_source("broad", rate_limit=limits)
    Intake(redis_client, settings).push(source, [TaskMessage(source="broad", url=f"http://{host}/page/{index}")
                                                 for index, host in enumerate(hosts)])
    return RateLimitStore(redis_client, settings)


def test_a_lent_place_admits_another_host_but_never_a_second_request_to_the_slow_host(
        redis_client: redis.Redis, settings: HarvesterSettings) -> None:
    store = _push(redis_client, settings, BROAD_LIMITS, "slow.test", "a.test", "slow.test", "b.test")
    slow, other = admit_and_start(store, "broad", 2)
    assert store.admit("broad", 5).status == "active_limit"
    lending = PlaceLending(store.scripts)

    lent = lending.lend("broad", leases_of(slow))
    assert (lent.lent, lent.total) == (frozenset({slow.task_id}), 1)
    assert lending.lend("broad", leases_of(slow)).lent == frozenset()  # once per lease
    admitted = store.admit("broad", 5)
    # slow.test's second page waits for its host (per_host_max_active 1 still counts the slow request); b.test runs
    assert [message.url for message in admitted.task_messages()] == ["http://b.test/page/3"]
    assert store.admit("broad", 5).status in ("active_limit", "host_limit")

    assert store.release("broad", leases_of(slow)) == 1  # the lease ends: its lent place goes with it
    assert redis_client.zcard(SourceKeys("broad").lent_places) == 0
    assert store.admit("broad", 5).status == "active_limit"  # two in flight again (other, b.test): no room
    store.start("broad", leases_of(*admitted.task_messages()))
    store.release("broad", leases_of(other, *admitted.task_messages()))
    assert [message.url for message in store.admit("broad", 5).task_messages()] == ["http://slow.test/page/2"]


@pytest.mark.parametrize("ending", ["fail", "reap", "worker_lost"])
def test_every_ending_of_a_lease_takes_its_lent_place_back(
        redis_client: redis.Redis, settings: HarvesterSettings, ending: str) -> None:
    store = _push(redis_client, settings, BROAD_LIMITS, "slow.test", "a.test")
    slow, _ = admit_and_start(store, "broad", 2)
    now = store.server_time()
    assert PlaceLending(store.scripts).lend("broad", leases_of(slow)).total == 1
    if ending == "fail":
        store.fail(slow, "timeout")  # retried after backoff
    elif ending == "reap":
        store.reap(["broad"], now=now + settings.lease_seconds + 1)
    else:
        store.worker_lost("broad", leases_of(slow))
    assert redis_client.zcard(SourceKeys("broad").lent_places) == 0


def test_only_held_started_leases_lend_and_at_most_twice_max_active_places(
        redis_client: redis.Redis, settings: HarvesterSettings) -> None:
    store = _push(redis_client, settings, BROAD_LIMITS, *(f"{name}.test" for name in "abcdef"))
    first = admit_and_start(store, "broad", 2)
    lending = PlaceLending(store.scripts)
    stale = {first[0].task_id: "999"}
    assert lending.lend("broad", stale).lent == frozenset()
    assert lending.lend("broad", leases_of(*first)).total == 2
    reserved = store.admit("broad", 5).task_messages()
    assert len(reserved) == 2  # max_active 2, 2 in flight, 2 lent: two places
    assert lending.lend("broad", leases_of(*reserved)).lent == frozenset()  # admitted, not started: nothing to lend
    store.start("broad", leases_of(*reserved))
    assert lending.lend("broad", leases_of(*reserved)).total == 4
    more = store.admit("broad", 5).task_messages()
    assert len(more) == 2
    store.start("broad", leases_of(*more))
    capped = lending.lend("broad", leases_of(*more))
    assert (capped.lent, capped.total, capped.lends) == (frozenset(), 4, True)  # twice max_active lent already
    store.release("broad", leases_of(first[0]))
    assert len(lending.lend("broad", leases_of(*more)).lent) == 1  # offered again once a lent place came back


def test_a_source_without_a_per_host_limit_lends_nothing(
        redis_client: redis.Redis, settings: HarvesterSettings) -> None:
    store = _push(redis_client, settings, {"max_active": 1, "per_minute": 10_000}, "slow.test", "a.test")
    [slow] = admit_and_start(store, "broad", 1)
    refused = PlaceLending(store.scripts).lend("broad", leases_of(slow))
    assert (refused.lent, refused.lends) == (frozenset(), False)
    assert store.admit("broad", 5).status == "active_limit"


def test_hand_back_returns_started_slow_tasks_to_the_front_of_intake_with_the_same_attempt(
        redis_client: redis.Redis, settings: HarvesterSettings) -> None:
    store = _push(redis_client, settings, {**BROAD_LIMITS, "max_active": 3}, "slow.test", "a.test", "b.test")
    slow, other = admit_and_start(store, "broad", 2)
    [queued] = store.admit("broad", 1).task_messages()  # admitted, not started: not this batch's to hand back
    lending = PlaceLending(store.scripts)
    lending.lend("broad", leases_of(slow))
    keys = SourceKeys("broad")
    assert lending.hand_back("broad", {**leases_of(slow, queued), other.task_id: "999"}) == 1
    assert redis_client.zcard(keys.lent_places) == 0 and redis_client.hget(keys.host_active_counts, "slow.test") is None
    assert store.counters("broad")["handed_back"] == 1 and "failed" not in store.counters("broad")
    assert sorted(store.active_task_ids("broad")) == sorted([other.task_id, queued.task_id])
    [again] = store.admit("broad", 5).task_messages()  # first in intake, same attempt
    assert (again.task_id, again.attempt) == (slow.task_id, slow.attempt)
    assert lending.hand_back("broad", leases_of(slow)) == 0  # its old token holds nothing now
