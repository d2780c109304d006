"""Focused tests of the delivery defects docs/reliability.md lists, each against a real redis-server (and, where
named, the real MongoDB server and a real distributor round). Each states the promise, not the bug."""

from __future__ import annotations

import threading
import time

import pydantic
import pytest
import redis
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.distributor.service import Distributor
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.fixtures.environment import harvester_environment

pytestmark = pytest.mark.integration


def admit(store: RateLimitStore, source: str, wanted: int, now: float | None = None) -> list[TaskMessage]:
    """Admit, publish (as the distributor does) and return the messages with their lease tokens."""
    admission = store.admit(source, wanted, now=now)
    messages = [TaskMessage.from_json(raw).model_copy(update={"lease_token": token})
                for raw, token in zip(admission.messages, admission.tokens, strict=True)]
    store.mark_published(source, {message.task_id: message.lease_token for message in messages}, now=now)
    return messages


def leases(*messages: TaskMessage) -> dict[str, str]:
    return {message.task_id: str(message.lease_token) for message in messages}


def push(client: redis.Redis, settings: HarvesterSettings, name: str = "shop", count: int = 1, **limits: object
         ) -> list[TaskMessage]:
    source = make_source(name, retries=limits.pop("retries", 3),
                         rate_limit={"max_active": 5, "per_minute": 1000, **limits})
    messages = [TaskMessage(source=name, url=f"http://a.test/{i}", run_id="r1", package_id=1) for i in range(count)]
    Intake(client, settings).push(source, messages)
    return messages


# -- fencing ------------------------------------------------------------------------------------------
def test_a_stale_holder_changes_nothing_and_is_counted(redis_client: redis.Redis, settings: HarvesterSettings):
    push(redis_client, settings)
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    [old] = admit(store, "shop", 1, now=now)
    assert store.start("shop", leases(old), now=now).held == [old.task_id]
    assert store.reap(now=now + settings.lease_seconds + 1).reaped == 1  # the first holder stalled
    [new] = admit(store, "shop", 1, now=now + settings.lease_seconds + 1)
    assert new.task_id == old.task_id and new.lease_token != old.lease_token and new.attempt == 1
    store.start("shop", leases(new), now=now + settings.lease_seconds + 1)

    assert store.heartbeat("shop", leases(old)) == []
    assert store.release("shop", leases(old)) == 0  # the late release of the stale holder frees nothing
    assert store.fail(old, "HTTP 500") is False  # and its late failure queues no third run
    assert store.active_task_ids("shop") == [new.task_id]
    assert redis_client.zcard(SourceKeys("shop").delayed) == 0
    assert store.counters("shop")["stale"] == 3
    assert store.release("shop", leases(new)) == 1


def test_a_lease_starts_when_work_starts_and_a_queued_task_is_never_reaped(
        redis_client: redis.Redis, settings: HarvesterSettings):
    push(redis_client, settings, count=3, retries=0)
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    queued = admit(store, "shop", 3, now=now)
    later = now + settings.lease_seconds * 10
    assert store.reap(now=later).reaped == 0  # waiting in a busy Celery queue is not dying
    assert store.stats(["shop"])["shop"].active == 3  # but it holds capacity (max_active)
    started = store.start("shop", leases(*queued[:2]), now=later)
    assert sorted(started.held) == sorted(message.task_id for message in queued[:2])
    # a duplicate or redelivered message of a started task is dropped and counted
    assert store.start("shop", leases(queued[0]), now=later).held == []
    assert store.counters("shop")["stale_deliveries"] == 1
    assert store.reap(now=later + settings.lease_seconds + 1).reaped == 2  # started, then silent: reaped
    assert DeadLetters(redis_client).count("shop") == 2  # retries 0: the started ones were charged


def test_admitted_but_never_published_tasks_come_back_uncharged(
        redis_client: redis.Redis, settings: HarvesterSettings):
    push(redis_client, settings, count=4, retries=0)
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    crashed = store.admit("shop", 4, now=now)  # ... and the distributor dies before publishing
    assert len(crashed.messages) == 4
    result = store.reap(now=now + settings.publish_grace_seconds + 1)
    assert result.dead_letters == {}
    back = [TaskMessage.from_json(raw) for raw in redis_client.lrange(SourceKeys("shop").intake, 0, -1)]
    assert len(back) == 4 and {message.attempt for message in back} == {0}
    assert DeadLetters(redis_client).count("shop") == 0


# -- admission in bounded chunks ----------------------------------------------------------------------
def test_admitting_5000_at_once_admits_them_all_or_nothing_is_lost(
        redis_client: redis.Redis, settings: HarvesterSettings):
    push(redis_client, settings, count=5000, max_active=10_000, per_minute=1_000_000)
    store = RateLimitStore(redis_client, settings)
    admission = store.admit("shop", 5000)
    stats = store.stats(["shop"])["shop"]
    assert len(admission.messages) == stats.active == 5000
    assert stats.pending == 0


def test_the_admit_batch_setting_is_bounded():
    with pytest.raises(pydantic.ValidationError):
        HarvesterSettings(admit_batch_size=50_000)


# -- the resume scan ----------------------------------------------------------------------------------
def test_the_resume_scan_misses_no_live_task_while_intake_moves(
        redis_client: redis.Redis, settings: HarvesterSettings):
    messages = push(redis_client, settings, count=20_000, max_active=10_000, per_minute=1_000_000)
    everyone = {message.task_id for message in messages}
    stop = threading.Event()
    admitting_client = redis.Redis(connection_pool=redis_client.connection_pool)

    def distribute() -> None:  # a distributor admitting (intake -> leases) all the while
        store = RateLimitStore(admitting_client, settings)
        while not stop.is_set() and store.admit("shop", 50).messages:
            pass

    thread = threading.Thread(target=distribute)
    thread.start()
    try:
        time.sleep(0.05)
        live = RateLimitStore(redis_client, settings).live_task_ids("shop", "r1")
    finally:
        stop.set()
        thread.join()
    assert everyone - live == set()  # every task was in intake or leased throughout


# -- one clock ----------------------------------------------------------------------------------------
def test_due_retries_are_decided_by_redis_time_not_the_distributors_clock(
        redis_client: redis.Redis, settings: HarvesterSettings, monkeypatch: pytest.MonkeyPatch):
    source = make_source("shop", rate_limit={"max_active": 5, "per_minute": 100})
    Intake(redis_client, settings).register_source(source)
    store = RateLimitStore(redis_client, settings)
    retry = TaskMessage(source="shop", url="http://a.test/1", attempt=1)
    redis_client.zadd(SourceKeys("shop").delayed, {retry.to_json(): store.server_time() - 1})  # due by Redis
    distributor = Distributor(redis_client, settings)
    distributor._next_reap = float("inf")  # a round between two reaps (a reap promotes due retries too)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)  # this machine's clock is an hour behind
    outcome = distributor.run_round()
    assert outcome.admitted == 1


# -- bounded keys -------------------------------------------------------------------------------------
def test_host_pauses_expire(redis_client: redis.Redis, settings: HarvesterSettings):
    store = RateLimitStore(redis_client, settings)
    store.pause_host("shop", "a.test", 5)
    assert 0 < redis_client.pttl(SourceKeys("shop").host_paused) <= 5000 + 60_000


def test_dead_letters_are_capped_per_source_with_the_overflow_counted(
        redis_client: redis.Redis, settings: HarvesterSettings, monkeypatch: pytest.MonkeyPatch):
    capped = settings.model_copy(update={"dead_letters_max_per_source": 5})
    messages = push(redis_client, capped, count=8, max_active=100)
    store = RateLimitStore(redis_client, capped)
    for message in admit(store, "shop", 8):
        store.start("shop", leases(message))
        assert store.reject("shop", message.to_json(), "HTTP 404", token=message.lease_token) is True
    assert DeadLetters(redis_client).count("shop") == 5
    assert store.counters("shop")["dead_overflow"] == 3
    assert store.counters("shop")["dead"] == len(messages)


def test_per_run_dead_letter_records_are_trimmed_when_the_run_ends(
        redis_client: redis.Redis, settings: HarvesterSettings):
    push(redis_client, settings, count=2, retries=0)
    store = RateLimitStore(redis_client, settings)
    for message in admit(store, "shop", 2):
        store.start("shop", leases(message))
        store.fail(message, "HTTP 500")
    dead = DeadLetters(redis_client)
    assert dead.dead_for_run("shop", "r1") == 2
    dead.end_run("shop", "r1")
    assert redis_client.hlen(SourceKeys("shop").run_dead) == 0


# -- per_minute as the site sees it -------------------------------------------------------------------
def test_per_minute_is_taken_at_fetch_time(redis_client: redis.Redis, settings: HarvesterSettings):
    push(redis_client, settings, count=6, per_minute=3, max_active=10)
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    assert [store.acquire_fetch("shop", now=now) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = store.acquire_fetch("shop", now=now + 0.5)
    window = settings.rate_window_seconds + settings.rate_window_margin_seconds  # a token counts this long
    assert wait == pytest.approx(window - 0.5, abs=1e-3)
    assert store.acquire_fetch("shop", now=now + window + 0.01) == 0.0


# -- Celery: no redelivery outside admission ----------------------------------------------------------
@pytest.mark.unit
def test_the_celery_app_bounds_redelivery(monkeypatch: pytest.MonkeyPatch):
    from harvester.workers.celery_app import create_app

    with harvester_environment(monkeypatch, celery_visibility_timeout_seconds=900):
        conf = create_app().conf
    assert conf.broker_transport_options["visibility_timeout"] == 900
    assert conf.worker_max_memory_per_child > 0
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is True
    assert conf.task_reject_on_worker_lost is False  # a lost worker's batch goes through admission again


# -- a lost worker's requests drain before its place is given away -------------------------------------
def test_a_lost_worker_keeps_its_place_in_max_active_while_its_requests_drain(
        redis_client: redis.Redis, settings: HarvesterSettings) -> None:
    """The dead pool process's request may still be in flight at the site: for delay_seconds (a lease) its
    place still counts against max_active, so no other task is admitted into it; then the reaper frees it
    without queuing anything twice. (The clean-clone run of row 1 saw 8 in flight with max_active 4.)"""
    push(redis_client, settings, count=2, max_active=1)
    store = RateLimitStore(redis_client, settings)
    now = store.server_time()
    [lost] = admit(store, "shop", 1, now=now)
    store.start("shop", leases(lost), now=now)
    assert store.worker_lost("shop", leases(lost), now=now).retried == 1
    assert admit(store, "shop", 1, now=now + 1) == []  # the other task waits: the site may still see one
    later = now + settings.lease_seconds + 1
    store.reap(now=later)
    admitted = admit(store, "shop", 1, now=later)
    assert len(admitted) == 1  # the place is free again, and exactly one task takes it
    stats = store.stats(["shop"])["shop"]
    assert stats.delayed + stats.pending == 1 and stats.active == 1  # the lost task waits for its retry


def test_a_reported_run_keeps_its_per_run_records_until_the_next_run_reports(
        redis_client: redis.Redis, settings: HarvesterSettings):
    """A cleared DAG run reports its harvest run again, from these records (tests/workers/test_quality.py)."""
    dead = DeadLetters(redis_client)
    key = SourceKeys("shop").run_dead
    redis_client.hset(key, mapping={"r1": 2, "r1|0": 2, "r2": 1, "r2|3": 1})
    assert dead.end_runs_before("shop", "r2") == 2
    assert {field.decode() for field in redis_client.hkeys(key)} == {"r2", "r2|3"}
    assert dead.end_runs_before("shop", "r2") == 0
