"""``take_queued.lua``: a running batch with room takes on tasks of its source that were admitted and published but
not started (their Celery message still waits for a worker process), against a real redis-server."""

from __future__ import annotations

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import held_messages, leases_of

pytestmark = pytest.mark.integration


def shop_with_tasks(redis_client: redis.Redis, settings: HarvesterSettings, count: int) -> RateLimitStore:
    source = make_source("shop", rate_limit={"max_active": 100, "per_minute": 1000})
    Intake(redis_client, settings).push(source, [TaskMessage(source="shop", url=f"http://a.test/{n}")
                                                 for n in range(count)])
    return RateLimitStore(redis_client, settings)


def test_only_queued_tasks_are_taken_oldest_first_and_started_under_fresh_tokens(redis_client, settings):
    store = shop_with_tasks(redis_client, settings, 6)
    now = store.server_time()
    admitted = held_messages(store.admit("shop", 1, now=now))  # admitted, never published: the distributor's
    first_queued = held_messages(store.admit("shop", 2, now=now))
    store.mark_published("shop", leases_of(*first_queued), now=now)
    later_queued = held_messages(store.admit("shop", 2, now=now + 1))
    store.mark_published("shop", leases_of(*later_queued), now=now + 1)
    running = held_messages(store.admit("shop", 1, now=now))
    store.mark_published("shop", leases_of(*running), now=now)
    assert store.start("shop", leases_of(*running), now=now).held == [running[0].task_id]

    taken = store.take_queued("shop", 3, now=now + 2)
    # the earlier published first (tasks published together come in the order of their ids)
    assert {message.task_id for message in taken[:2]} == {message.task_id for message in first_queued}
    [third] = [message for message in later_queued if message.task_id == taken[2].task_id]
    [left] = [message for message in later_queued if message is not third]
    assert all(message.lease_token not in {m.lease_token for m in first_queued + later_queued} for message in taken)
    leases = SourceKeys("shop").leases
    assert {redis_client.hget(leases, message.task_id).decode() for message in taken} == {
        f"s|{message.lease_token}" for message in taken}
    # the admitted task and the one already running are not taken; the rest stays queued
    assert [message.task_id for message in store.take_queued("shop", 10, now=now + 2)] == [left.task_id]
    assert redis_client.hget(leases, admitted[0].task_id).decode().startswith("a|")
    assert redis_client.hget(leases, running[0].task_id).decode() == f"s|{running[0].lease_token}"
    counters = store.counters("shop")
    assert counters["taken_over"] == 4 and counters["started"] == 5


def test_a_taken_task_is_the_batch_s_own_and_its_old_message_is_dropped(redis_client, settings):
    store = shop_with_tasks(redis_client, settings, 2)
    now = store.server_time()
    queued = held_messages(store.admit("shop", 2, now=now))
    store.mark_published("shop", leases_of(*queued), now=now)
    taken = store.take_queued("shop", 1, now=now)
    [before] = [message for message in queued if message.task_id == taken[0].task_id]  # the same queued task
    [other] = [message for message in queued if message is not before]
    assert (taken[0].url, taken[0].source) == (before.url, "shop") and taken[0].lease_token != before.lease_token
    # the message that carried it, run later, holds only the task nobody took
    assert store.start("shop", leases_of(*queued), now=now).held == [other.task_id]
    assert store.counters("shop")["stale_deliveries"] == 1
    # the batch that took it heartbeats and releases it under its new token; the old token does nothing
    assert store.heartbeat("shop", leases_of(*taken), now=now + 1) == [taken[0].task_id]
    assert store.release("shop", leases_of(before)) == 0
    assert store.release("shop", leases_of(*taken)) == 1
    assert store.take_queued("shop", 5, now=now + 1) == []  # the other one is started: nothing queued is left


def test_the_taken_lease_runs_on_the_redis_clock_and_counts_nothing_twice(redis_client, settings):
    store = shop_with_tasks(redis_client, settings, 1)
    queued = held_messages(store.admit("shop", 1))
    store.mark_published("shop", leases_of(*queued))
    active_before = redis_client.zcard(SourceKeys("shop").active)
    [taken] = store.take_queued("shop", 1)  # no ``now``: the server's TIME
    deadline = redis_client.zscore(SourceKeys("shop").active, taken.task_id)
    assert abs(deadline - (store.server_time() + settings.lease_seconds)) < 1.0
    # admission counted it once: taking it over changes neither max_active's count nor admitted
    assert redis_client.zcard(SourceKeys("shop").active) == active_before
    assert store.counters("shop")["admitted"] == 1
    assert store.take_queued("shop", 0) == []
