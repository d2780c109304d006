"""A task whose batch's process died beside other started tasks runs alone until it ends (``TaskMessage.run_alone``),
against a real redis-server: ``worker_lost.lua`` marks it, a batch's refill (``admit.lua`` with ``beside_others``,
``take_queued.lua``) leaves it, the distributor admits it and publishes it in a message of its own. Without it a
page killed beside a poison page came back with it after the same lease, was taken on beside it again, and was
dead-lettered as a poison page itself (the fault matrix's row 9)."""

from __future__ import annotations

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.distributor.publisher import CeleryPublisher, celery_app_for
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import admit_and_start, held_messages, leases_of

pytestmark = pytest.mark.integration


def shop(redis_client: redis.Redis, settings: HarvesterSettings, messages: list[TaskMessage],
         **rate_limit: int) -> RateLimitStore:
    source = make_source("shop", retries=3, rate_limit={"max_active": 10, "per_minute": 1000, **rate_limit})
    Intake(redis_client, settings).push(source, messages)
    return RateLimitStore(redis_client, settings)


def back_from_their_lease(store: RateLimitStore, settings: HarvesterSettings, now: float,
                          beside_others: bool = False) -> list[TaskMessage]:
    """What admission gives once the retries of a lost batch are due (they wait a lease)."""
    return held_messages(store.admit("shop", 10, now=now + settings.lease_seconds + 1, beside_others=beside_others))


def test_tasks_that_died_beside_others_come_back_to_run_alone(redis_client, settings):
    store = shop(redis_client, settings, [TaskMessage(source="shop", url=f"http://a.test/{n}") for n in range(3)])
    now = store.server_time()
    first, second, third = admit_and_start(store, "shop", 3, now=now)
    store.release("shop", leases_of(third))  # it ended before the process died: not one of the dead
    lost = store.worker_lost("shop", leases_of(first, second, third), now=now)
    assert (lost.retried, lost.dead_entries) == (2, [])
    back = back_from_their_lease(store, settings, now)
    assert {message.task_id: message.run_alone for message in back} == {first.task_id: True, second.task_id: True}
    assert all(message.attempt == 1 for message in back)


def test_a_task_that_died_alone_is_not_marked_and_its_second_kill_is_its_last(redis_client, settings):
    store = shop(redis_client, settings, [TaskMessage(source="shop", url="http://a.test/poison")])
    now = store.server_time()
    [poison] = admit_and_start(store, "shop", 1, now=now)
    assert store.worker_lost("shop", leases_of(poison), now=now).retried == 1
    [back] = back_from_their_lease(store, settings, now)
    assert not back.run_alone
    store.mark_published("shop", leases_of(back), now=now + settings.lease_seconds + 1)
    store.start("shop", leases_of(back), now=now + settings.lease_seconds + 1)
    [entry] = store.worker_lost("shop", leases_of(back), now=now + settings.lease_seconds + 1).dead_entries
    assert "killed its worker 2 times" in entry


def test_a_refill_leaves_a_task_that_runs_alone_to_the_distributor(redis_client, settings):
    alone = TaskMessage(source="shop", url="http://a.test/1", attempt=1, run_alone=True)
    plain = TaskMessage(source="shop", url="http://a.test/2")
    store = shop(redis_client, settings, [alone, plain])
    taken_on = held_messages(store.admit("shop", 10, beside_others=True))
    assert [message.task_id for message in taken_on] == [plain.task_id]
    assert held_messages(store.admit("shop", 10, beside_others=True)) == []  # it waits, not lost
    [admitted] = held_messages(store.admit("shop", 10))  # the distributor's admission
    assert admitted.task_id == alone.task_id and admitted.run_alone


def test_a_refill_leaves_a_task_that_runs_alone_in_its_hosts_queue(redis_client, settings):
    busy = TaskMessage(source="shop", url="http://a.test/1")
    alone = TaskMessage(source="shop", url="http://a.test/2", attempt=1, run_alone=True)
    store = shop(redis_client, settings, [busy, alone], per_host_max_active=1)
    [running] = admit_and_start(store, "shop", 10)  # the other waits in its host's queue
    store.release("shop", leases_of(running))
    assert held_messages(store.admit("shop", 10, beside_others=True)) == []
    [admitted] = held_messages(store.admit("shop", 10))
    assert admitted.task_id == alone.task_id


def test_a_running_batch_does_not_take_over_a_queued_task_that_runs_alone(redis_client, settings):
    alone = TaskMessage(source="shop", url="http://a.test/1", attempt=1, run_alone=True)
    plain = TaskMessage(source="shop", url="http://a.test/2")
    store = shop(redis_client, settings, [alone, plain])
    now = store.server_time()
    queued = held_messages(store.admit("shop", 10, now=now))
    store.mark_published("shop", leases_of(*queued), now=now)
    assert [message.task_id for message in store.take_queued("shop", 10, now=now + 1)] == [plain.task_id]


def test_a_task_that_runs_alone_is_published_in_a_message_of_its_own(settings):
    publisher = CeleryPublisher(celery_app_for(settings), batch_size=16)
    tasks = [{"source": "shop", "task_id": str(n), "run_alone": n in (2, 5)} for n in range(8)]
    messages = publisher.split(tasks)
    assert [[task["task_id"] for task in message] for message in messages] == [
        ["2"], ["5"], ["0", "1", "3", "4", "6", "7"]]
