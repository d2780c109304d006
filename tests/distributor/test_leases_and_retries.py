"""Leases, reaping, retries with backoff, Retry-After and dead letters against a real redis-server."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import redis
from harvester.config import HttpRequest
from harvester.distributor import DeadLetters, Intake, RateLimitStore, RetryPolicy, TaskMessage
from harvester.redis_keys import INTAKE_SIGNAL, SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import admit_and_start, leases_of

pytestmark = pytest.mark.integration


def one_task_of_shop(redis_client: redis.Redis, settings: HarvesterSettings, *, retries: int | None = None,
                     max_active: int = 1, policy: RetryPolicy | None = None, **task: Any
                     ) -> tuple[RateLimitStore, float]:
    """Source "shop" (the model's retries unless given) with one task (of ``task``'s run and package) in its
    intake: its store, and the server's time."""
    source = make_source("shop", rate_limit={"max_active": max_active, "per_minute": 100},
                         **({} if retries is None else {"retries": retries}))
    Intake(redis_client, settings).push(source, [TaskMessage(source="shop", url="http://a.test/1", **task)])
    store = RateLimitStore(redis_client, settings, policy)
    return store, store.server_time()


def admit_one(store: RateLimitStore, source: str, now: float) -> TaskMessage:
    """Admit, publish and start one task (its lease starts now); the message with its fencing token."""
    [message] = admit_and_start(store, source, 1, now=now)
    return message


def test_an_expired_lease_goes_back_to_intake_with_attempt_raised(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    store, now = one_task_of_shop(redis_client, settings, retries=2, run_id="r1", package_id=7)
    lease = settings.lease_seconds
    task = admit_one(store, "shop", now)

    assert store.reap(now=now + lease - 0.1).reaped == 0  # still leased
    assert store.heartbeat("shop", leases_of(task), now=now + lease - 0.1) == [task.task_id]
    assert store.reap(now=now + lease + 0.5).reaped == 0  # the heartbeat moved the deadline
    assert store.reap(now=now + 2 * lease).reaped == 1
    assert store.heartbeat("shop", leases_of(task), now=now + 2 * lease) == []  # that lease is gone

    again = admit_one(store, "shop", now + 2 * lease)
    assert (again.task_id, again.attempt, again.run_id, again.package_id) == (task.task_id, 1, "r1", 7)
    # the first worker's late release must not free the lease of the task's new holder (it would fetch unadmitted)
    assert again.lease_token != task.lease_token
    assert store.release("shop", leases_of(task)) == 0
    assert store.active_task_ids("shop") == [task.task_id]
    assert store.counters("shop")["stale"] == 2  # the late heartbeat and the late release
    assert store.release("shop", leases_of(again)) == 1
    assert store.counters("shop")["reaped"] == 1


def test_a_reap_wakes_distributors_only_when_it_brought_tasks_back(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    store, now = one_task_of_shop(redis_client, settings)
    admit_one(store, "shop", now)
    redis_client.delete(INTAKE_SIGNAL)
    assert store.reap(now=now + 0.1).reaped == 0
    assert redis_client.llen(INTAKE_SIGNAL) == 0  # nothing came back: a waiting distributor sleeps on
    assert store.reap(now=now + settings.lease_seconds + 0.5).reaped == 1
    assert redis_client.lrange(INTAKE_SIGNAL, 0, -1) == [b"shop"]  # the source whose task is back


def test_reaped_past_retries_lands_in_dead_letters_with_the_reason(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    store, now = one_task_of_shop(redis_client, settings, retries=1, run_id="r9", package_id=3)
    for attempt in range(2):
        admit_one(store, "shop", now + attempt * 10)
        result = store.reap(now=now + attempt * 10 + settings.lease_seconds + 1)
        assert result.reaped == 1
    assert list(result.dead_letters) == ["shop"]
    dead = DeadLetters(redis_client)
    [entry] = dead.list("shop")
    assert entry.reason == "lease expired: no worker finished the task (attempt 2 of 2)"
    assert entry.task_message().run_id == "r9"
    assert dead.dead_for_run("shop", "r9") == 1 and dead.dead_for_run("shop", "r9", 3) == 1
    assert store.stats(["shop"])["shop"].dead_letters_waiting == 1
    assert redis_client.llen(SourceKeys("shop").intake) == 0


def test_failure_retries_after_exponential_backoff_then_dead_letters(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    store, now = one_task_of_shop(redis_client, settings, retries=2, max_active=5, run_id="r1", package_id=1,
                                  policy=RetryPolicy(base_seconds=1.0, max_seconds=3.0, jitter=0))
    expected_delays = [1.0, 2.0]
    for attempt, delay in enumerate(expected_delays):
        task = admit_one(store, "shop", now)
        assert task.attempt == attempt
        assert store.fail(task, "HTTP 500", now=now) is False
        [(_, due)] = redis_client.zrange(SourceKeys("shop").delayed, 0, -1, withscores=True)
        assert due == pytest.approx(now + delay, abs=1e-3)
        assert store.admit("shop", 1, now=now + delay - 0.01).status == "empty"
        now += delay
    last = admit_one(store, "shop", now)
    assert last.attempt == 2
    assert store.fail(last, "HTTP 500: server error", now=now) is True
    [entry] = DeadLetters(redis_client).list("shop")
    assert (entry.reason, entry.message["attempt"]) == ("HTTP 500: server error", 2)
    assert store.fail(last, "again", now=now) is False  # no lease held any more: nothing happens twice
    assert DeadLetters(redis_client).count("shop") == 1


def test_retry_after_pauses_the_host_for_every_worker(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 10, "per_minute": 100})
    intake = Intake(redis_client, settings)
    intake.push(source, [TaskMessage(source="shop", url="http://slow.test/1")])
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    task = admit_one(store, "shop", now)
    assert store.fail(task, "HTTP 429", retry_after=30, now=now) is False
    intake.push(source, [TaskMessage(source="shop", url="http://slow.test/2"),
                         TaskMessage(source="shop", url="http://fast.test/1")])
    admitted = store.admit("shop", 10, now=now + 1)
    assert [TaskMessage.from_json(raw).url for raw in admitted.messages] == ["http://fast.test/1"]
    assert store.admit("shop", 10, now=now + 2).status == "host_limit"
    later = store.admit("shop", 10, now=now + 31)
    assert sorted(TaskMessage.from_json(raw).url for raw in later.messages) == [
        "http://slow.test/1", "http://slow.test/2"]


def test_pause_source_holds_all_admission_and_never_shortens(redis_client: redis.Redis, settings: HarvesterSettings):
    Intake(redis_client, settings).push(make_source("shop"), [TaskMessage(source="shop", url="http://a.test/")])
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    assert store.pause_source("shop", 20, now=now) == pytest.approx(now + 20, abs=1e-3)
    assert store.pause_source("shop", 5, now=now) == pytest.approx(now + 20, abs=1e-3)
    paused = store.admit("shop", 1, now=now + 10)
    assert (paused.status, paused.wait_seconds) == ("paused", pytest.approx(10, abs=1e-3))
    assert store.admit("shop", 1, now=now + 20.5).status == "ok"
    store.pause_host("shop", "A.test", 5, now=now)
    assert redis_client.hget(SourceKeys("shop").host_paused, "a.test") is not None


def test_dead_letters_list_requeue_purge_and_the_command(
    redis_client: redis.Redis, settings: HarvesterSettings, distributor_env: dict[str, str]
):
    source = make_source("shop", retries=0, rate_limit={"max_active": 10, "per_minute": 100})
    intake = Intake(redis_client, settings)
    intake.push(source, [TaskMessage(source="shop", url=f"http://a.test/{i}", run_id="r1", package_id=1)
                         for i in range(3)])
    intake.push_raw("shop", ["garbage"])
    store = RateLimitStore(redis_client, settings)
    for message in admit_and_start(store, "shop", 10):
        assert store.fail(message, "HTTP 404") is True
    dead = DeadLetters(redis_client)
    assert dead.count("shop") == 4 and dead.dead_for_run("shop", "r1") == 3

    def command(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "harvester.cli", "dead-letters", *args, "--source", "shop"],
                              env=distributor_env, capture_output=True, text=True, check=True, timeout=60).stdout

    listing = command("list")
    assert "shop: 4 dead letters" in listing and "HTTP 404" in listing and "malformed message" in listing
    assert len([json.loads(line) for line in command("list", "--json").splitlines()]) == 4

    assert "2 dead letters re-queued" in command("requeue", "--limit", "3")  # garbage stays
    assert dead.dead_for_run("shop", "r1") == 1
    requeued = [TaskMessage.from_json(raw) for raw in redis_client.lrange(SourceKeys("shop").intake, 0, -1)]
    assert [task.attempt for task in requeued] == [0, 0]
    assert dead.requeue("shop") == 1 and dead.count("shop") == 1
    assert "1 dead letters purged" in command("purge")
    assert dead.count("shop") == 0


# -- a request not safe_to_repeat is never sent twice behind the user's back ---------------------------------
def unsafe_post(safe_to_repeat: bool = False) -> HttpRequest:
    return HttpRequest.model_validate({"method": "POST", "json": {"order": 1}, "safe_to_repeat": safe_to_repeat})


def test_a_started_post_not_safe_to_repeat_is_dead_lettered_when_its_lease_expires(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    """Its worker vanished after starting it: the site may have received the POST, so the reaper must not
    send it again (a retry would repeat an order, a vote, a message); it becomes a dead letter that says so,
    whatever retries the source has left. A safe POST (a query) is retried as a GET is."""
    store, now = one_task_of_shop(redis_client, settings, retries=3, max_active=2, run_id="r1", package_id=2,
                                  request=unsafe_post())
    Intake(redis_client, settings).push(make_source("shop", rate_limit={"max_active": 2, "per_minute": 100},
                                                    retries=3),
                                        [TaskMessage(source="shop", url="http://a.test/2", request=unsafe_post(True))])
    unsafe, safe = admit_and_start(store, "shop", 2, now=now)
    assert (unsafe.request.safe_to_repeat, safe.request.safe_to_repeat) == (False, True)

    result = store.reap(now=now + settings.lease_seconds + 1)

    assert result.reaped == 2
    [entry] = DeadLetters(redis_client).list("shop")
    assert entry.reason.startswith("unsafe_to_retry: ") and "(lease expired)" in entry.reason
    assert entry.task_message().task_id == unsafe.task_id and entry.task_message().attempt == 0
    back = [TaskMessage.from_json(raw) for raw in redis_client.lrange(SourceKeys("shop").intake, 0, -1)]
    assert [(task.task_id, task.attempt) for task in back] == [(safe.task_id, 1)]  # the query is retried
    assert store.counters("shop")["unsafe_to_retry"] == 1
    assert DeadLetters(redis_client).dead_for_run("shop", "r1", 2) == 1  # its package can finish


def test_a_post_not_safe_to_repeat_that_never_started_goes_back_uncharged(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    """Admitted but never started (its Celery message was never delivered): it was not sent, so it goes back
    to intake as it was; only a started one may have reached the site."""
    store, now = one_task_of_shop(redis_client, settings, request=unsafe_post())
    admitted = store.admit("shop", 1, now=now)
    assert len(admitted.messages) == 1
    result = store.reap(now=now + settings.publish_grace_seconds + 1)
    assert (result.reaped, result.returned) == (0, 1)
    assert DeadLetters(redis_client).list("shop") == []
    [back] = [TaskMessage.from_json(raw) for raw in redis_client.lrange(SourceKeys("shop").intake, 0, -1)]
    assert back.attempt == 0 and back.request == unsafe_post()


def test_a_post_not_safe_to_repeat_of_a_lost_worker_is_dead_lettered_not_retried(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    """The pool process died running the batch (SIGKILL, OOM): a started unsafe POST is dead-lettered at once
    with unsafe_to_retry, where a GET of the same batch waits for its retry."""
    store, now = one_task_of_shop(redis_client, settings, retries=3, max_active=2, request=unsafe_post())
    Intake(redis_client, settings).push(make_source("shop", rate_limit={"max_active": 2, "per_minute": 100},
                                                    retries=3),
                                        [TaskMessage(source="shop", url="http://a.test/2")])
    unsafe, plain = admit_and_start(store, "shop", 2, now=now)
    lost = store.worker_lost("shop", leases_of(unsafe, plain), now=now)
    assert lost.retried == 1
    [entry] = [json.loads(raw) for raw in lost.dead_entries]
    assert entry["reason"].startswith("unsafe_to_retry: ") and entry["reason"].endswith("(worker lost)")
    assert entry["message"]["task_id"] == unsafe.task_id
    assert store.stats(["shop"])["shop"].delayed == 1  # the GET, after its lease
