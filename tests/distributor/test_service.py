"""The distributor service: fairness, priority, backpressure, wake-up, shutdown, malformed input, outages."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.distributor.service import Distributor
from harvester.pageslots.bookkeeping import BrowserTaskBook
from harvester.pageslots.handoff import PageSlotHandoff
from harvester.redis_keys import INTAKE_SIGNAL, PageSlotKeys, SourceKeys
from harvester.services import readiness
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import (
    MALFORMED_TASK_ID,
    published_batches,
    published_tasks,
    push_with_one_malformed,
    start_distributor,
    stop,
)
from tests.fixtures.servers import RedisServer

pytestmark = pytest.mark.integration


def tasks(source: str, count: int, **fields: object) -> list[TaskMessage]:
    return [TaskMessage(source=source, url=f"http://{source}.test/{i}", **fields) for i in range(count)]


def test_a_huge_source_does_not_starve_a_tiny_one(redis_client: redis.Redis, settings: HarvesterSettings):
    intake = Intake(redis_client, settings)
    intake.push(make_source("huge", rate_limit={"max_active": 10_000, "per_minute": 1_000_000}), tasks("huge", 20_000))
    intake.push(make_source("tiny", rate_limit={"max_active": 100, "per_minute": 1000}), tasks("tiny", 10))
    distributor = Distributor(redis_client, settings.model_copy(update={"admit_batch_size": 200}))

    outcome = distributor.run_round()
    published = published_tasks(redis_client, "default")
    assert sum(task["source"] == "tiny" for task in published) == 10  # all of it, in the first round
    assert sum(task["source"] == "huge" for task in published) == 200  # one batch, not the backlog
    assert outcome.admitted == 210
    assert all(len({task["source"] for task in batch}) == 1 for batch in published_batches(redis_client, "default"))


def test_high_priority_sources_are_admitted_first(redis_client: redis.Redis, settings: HarvesterSettings):
    limits = {"max_active": 100, "per_minute": 1000}
    intake = Intake(redis_client, settings)
    # both browser sources of one country share its slots' task list, so they compete for its room
    normal = make_source("aaa_normal", render="browser", country="SG", rate_limit=limits)
    high = make_source("zzz_high", render="browser", country="SG", priority="high", rate_limit=limits)
    intake.push(normal, tasks("aaa_normal", 8, country="SG"))
    intake.push(high, tasks("zzz_high", 8, country="SG"))
    distributor = Distributor(redis_client, settings.model_copy(
        update={"queue_max_depth": 1, "publish_batch_size": 4, "admit_batch_size": 4}),
        browser_handoff=PageSlotHandoff(redis_client))

    country_list = PageSlotKeys().browser_tasks("SG")  # browser tasks go to their country's slot list

    def waiting() -> list[dict[str, object]]:
        return [json.loads(raw) for raw in redis_client.lrange(country_list, 0, -1)]

    for _ in range(3):  # the start rotates every round inside a tier, never across tiers
        redis_client.delete(country_list)
        distributor.run_round()
        batch = waiting()
        assert len(batch) == 4 and redis_client.llen("pageslots") == 0  # no Celery message
        assert {task["source"] for task in batch} == {"zzz_high"} or redis_client.llen(
            SourceKeys("zzz_high").intake) == 0
    redis_client.delete(country_list)
    distributor.run_round()
    assert {task["source"] for task in waiting()} == {"aaa_normal"}
    assert BrowserTaskBook(redis_client).census()["SG"].pending == 16  # every admitted one, for the allocator


def test_a_browser_task_goes_to_the_slots_of_the_country_it_names(redis_client: redis.Redis,
                                                                    settings: HarvesterSettings):
    """The country travels as a task field; no queue name carries it (and none is parsed)."""
    source = make_source("sg_shop", render="browser", country="SG", rate_limit={"max_active": 10, "per_minute": 100})
    intake = Intake(redis_client, settings)
    intake.push(source, [*tasks("sg_shop", 2, country="MY"), TaskMessage(source="sg_shop", url="http://sg_shop.test/x")])
    distributor = Distributor(redis_client, settings, browser_handoff=PageSlotHandoff(redis_client))
    assert distributor.run_round().admitted == 3
    keys = PageSlotKeys()
    malaysia = [json.loads(raw) for raw in redis_client.lrange(keys.browser_tasks("MY"), 0, -1)]
    singapore = [json.loads(raw) for raw in redis_client.lrange(keys.browser_tasks("SG"), 0, -1)]
    assert len(malaysia) == 2 and {task["country"] for task in malaysia} == {"MY"}
    assert [task["url"] for task in singapore] == ["http://sg_shop.test/x"]  # no country: its source's
    assert singapore[0]["country"] == "SG" and singapore[0]["lease_token"]
    census = BrowserTaskBook(redis_client).census()
    assert (census["MY"].pending, census["SG"].pending) == (2, 1)
    assert not redis_client.keys("pageslots.*")  # no per-country "queue" exists anywhere


def test_a_distributor_without_the_page_slots_hand_off_leaves_browser_tasks_in_intake(
        redis_client: redis.Redis, settings: HarvesterSettings, caplog: pytest.LogCaptureFixture):
    limits = {"max_active": 10, "per_minute": 100}
    intake = Intake(redis_client, settings)
    intake.push(make_source("sg_shop", render="browser", country="SG", rate_limit=limits), tasks("sg_shop", 2))
    intake.push(make_source("shop", rate_limit=limits), tasks("shop", 2))
    outcome = Distributor(redis_client, settings).run_round()
    assert outcome.admitted == 2 and len(published_tasks(redis_client, "default")) == 2
    assert redis_client.llen(SourceKeys("sg_shop").intake) == 2  # nothing admitted it could not deliver
    assert "no page-slot hand-off" in caplog.text


def test_backpressure_caps_the_celery_queue(redis_client: redis.Redis, settings: HarvesterSettings):
    Intake(redis_client, settings).push(make_source("shop", rate_limit={"max_active": 1000, "per_minute": 10_000}),
                                        tasks("shop", 500))
    distributor = Distributor(redis_client, settings.model_copy(
        update={"queue_max_depth": 3, "publish_batch_size": 10}))
    for _ in range(5):
        outcome = distributor.run_round()
    assert redis_client.llen("default") == 3 and outcome.backpressured
    assert RateLimitStore(redis_client, settings).stats(["shop"])["shop"].active == 30
    redis_client.rpop("default")  # a worker took one message
    assert distributor.run_round().admitted == 10
    assert redis_client.llen("default") == 3


def test_a_round_that_fills_max_active_waits_for_a_release_instead_of_running_an_empty_round(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    Intake(redis_client, settings).push(make_source("shop", rate_limit={"max_active": 5, "per_minute": 10_000}),
                                        tasks("shop", 20))
    redis_client.delete(INTAKE_SIGNAL)  # the push's wake-up tokens: this test counts rounds, not wake-ups
    distributor = Distributor(redis_client, settings.model_copy(update={"reap_interval_seconds": 60}))
    distributor.run(max_seconds=0.5)
    assert distributor.totals.admitted == 5 and distributor.totals.rounds == 1  # then it waited


def test_a_round_bounded_by_its_batch_size_is_followed_at_once(redis_client: redis.Redis,
                                                                settings: HarvesterSettings):
    Intake(redis_client, settings).push(make_source("shop", rate_limit={"max_active": 100, "per_minute": 10_000}),
                                        tasks("shop", 20))
    redis_client.delete(INTAKE_SIGNAL)
    distributor = Distributor(redis_client, settings.model_copy(
        update={"admit_batch_size": 5, "reap_interval_seconds": 60}))
    distributor.run(max_seconds=0.5)
    assert distributor.totals.admitted == 20 and len(published_tasks(redis_client, "default")) == 20
    assert distributor.totals.rounds == 5  # four full rounds back to back, then one that found the intake empty


def test_a_release_wakes_a_distributor_that_waits_after_filling_max_active(redis_client: redis.Redis,
                                                                           settings: HarvesterSettings):
    Intake(redis_client, settings).push(make_source("shop", rate_limit={"max_active": 5, "per_minute": 10_000}),
                                        tasks("shop", 8))
    redis_client.delete(INTAKE_SIGNAL)
    distributor = Distributor(redis_client, settings.model_copy(update={"reap_interval_seconds": 60}))
    runner = threading.Thread(target=distributor.run, kwargs={"max_seconds": 1.2})
    runner.start()
    deadline = time.monotonic() + 1
    while distributor.totals.admitted < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # it now blocks on the signal list
    rounds = distributor.totals.rounds
    assert (distributor.totals.admitted, rounds) == (5, 1)
    store = RateLimitStore(redis_client, settings)
    queued = published_tasks(redis_client, "default")
    assert len(store.start("shop", {task["task_id"]: task["lease_token"] for task in queued}).held) == 5
    store.release("shop", {queued[0]["task_id"]: queued[0]["lease_token"]})  # pushes one wake-up token
    runner.join()
    assert distributor.totals.admitted == 6 and distributor.totals.rounds == rounds + 1


def test_invalid_message_is_dead_lettered_and_the_rest_published(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    source = make_source("shop", rate_limit={"max_active": 100, "per_minute": 1000})
    intake = Intake(redis_client, settings)
    intake.register_source(source)
    good = tasks("shop", 2)
    push_with_one_malformed(intake, "shop", good)
    outcome = Distributor(redis_client, settings).run_round()
    assert outcome.admitted == 2
    assert [task["task_id"] for task in published_tasks(redis_client, "default")] == [t.task_id for t in good]
    [entry] = [json.loads(raw) for raw in redis_client.lrange(SourceKeys("shop").dead_letters, 0, -1)]
    assert entry["message"]["task_id"] == MALFORMED_TASK_ID and entry["reason"].startswith("malformed message: depth:")
    assert RateLimitStore(redis_client, settings).stats(["shop"])["shop"].active == 2  # its lease was freed


def test_a_retry_is_published_when_due_not_at_the_next_reap(redis_client: redis.Redis, settings: HarvesterSettings):
    Intake(redis_client, settings).push(make_source("shop"), tasks("shop", 1))
    distributor = Distributor(redis_client, settings.model_copy(update={"reap_interval_seconds": 60}))
    distributor.run_round()
    [task] = published_tasks(redis_client, "default")
    redis_client.delete("default")
    assert RateLimitStore(redis_client, settings).fail(TaskMessage(**task), "HTTP 503", retry_after=0.5) is False
    started = time.monotonic()
    distributor.run(max_seconds=3)  # the failure woke it; it then sleeps exactly until the retry is due
    [retry] = published_tasks(redis_client, "default")
    assert (retry["task_id"], retry["attempt"]) == (task["task_id"], 1)
    assert distributor.totals.admitted == 2 and time.monotonic() - started >= 0.5


def wait_for(check, timeout: float = 10.0, what: str = "condition") -> None:
    readiness.wait_until(check, timeout, what, interval=0.02)


def test_service_wakes_on_intake_and_stops_cleanly_on_sigterm(
    redis_client: redis.Redis, settings: HarvesterSettings, distributor_env: dict[str, str], tmp_path: Path
):
    log_path = tmp_path / "distributor.log"
    # the reap timer is far away: only the intake signal can wake the service quickly
    process = start_distributor(distributor_env, log_path, reap_interval_seconds="60", publish_batch_size="5")
    try:
        wait_for(lambda: "distributor started" in log_path.read_text(), 30, "distributor start")
        source = make_source("shop", rate_limit={"max_active": 10_000, "per_minute": 1_000_000})
        intake = Intake(redis_client, settings)
        time.sleep(0.5)  # let it block on the signal list
        pushed_at = time.monotonic()
        intake.push(source, tasks("shop", 3))
        wait_for(lambda: len(published_tasks(redis_client, "default")) == 3, 5, "first publish")
        assert time.monotonic() - pushed_at < 1.0

        pushed = 3
        for round_number in range(20):  # keep intake busy while the signal arrives
            intake.push(source, tasks("shop", 200, depth=round_number + 1))
            pushed += 200
            if round_number == 10:
                process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        assert process.returncode == 0
    finally:
        stop(process)
    log = log_path.read_text()
    assert "distributor stopped" in log and "Traceback" not in log
    published = published_tasks(redis_client, "default")
    active = set(RateLimitStore(redis_client, settings).active_task_ids("shop"))
    # nothing lost: every admitted task was published, the rest still waits in intake
    assert {task["task_id"] for task in published} == active
    assert len(published) + redis_client.llen(SourceKeys("shop").intake) == pushed


def test_two_distributors_share_the_work_without_duplicates(
    redis_client: redis.Redis, settings: HarvesterSettings, distributor_env: dict[str, str], tmp_path: Path
):
    processes = [start_distributor(distributor_env, tmp_path / f"distributor-{i}.log", admit_batch_size="50",
                                   queue_max_depth="1000")
                 for i in range(2)]
    try:
        for i in range(2):
            wait_for(lambda i=i: "distributor started" in (tmp_path / f"distributor-{i}.log").read_text(), 30,
                     "distributor start")
        pushed = tasks("shop", 2000)
        Intake(redis_client, settings).push(
            make_source("shop", rate_limit={"max_active": 10_000, "per_minute": 1_000_000}), pushed)
        wait_for(lambda: len(published_tasks(redis_client, "default")) >= 2000, 30, "all published")
        time.sleep(0.3)
    finally:
        assert [stop(process) for process in processes] == [0, 0]
    published = [task["task_id"] for task in published_tasks(redis_client, "default")]
    assert sorted(published) == sorted(task.task_id for task in pushed)  # each exactly once
    admitted_by_each = [int(re.search(r"stopped: .*?admitted=(\d+)", (tmp_path / f"distributor-{i}.log").read_text())
                            .group(1)) for i in range(2)]
    assert sum(admitted_by_each) == 2000


def test_service_blocked_while_idle_exits_at_once_on_sigterm(distributor_env: dict[str, str], tmp_path: Path):
    log_path = tmp_path / "distributor.log"
    process = start_distributor(distributor_env, log_path, reap_interval_seconds="60")
    try:
        wait_for(lambda: "distributor started" in log_path.read_text(), 30, "distributor start")
        time.sleep(0.5)  # now blocked in BLPOP with a long timeout
        signalled_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
        assert process.returncode == 0 and time.monotonic() - signalled_at < 2.0
    finally:
        stop(process)
    assert "distributor stopped" in log_path.read_text() and "Traceback" not in log_path.read_text()


@pytest.fixture
def restartable_redis(tmp_path: Path) -> RedisServer:
    """A redis-server of this test's own (AOF, fsync always), so restarting it disturbs no other test."""
    from harvester.services.ports import LOOPBACK, free_port

    from tests.fixtures.servers import ServerProcess

    port = free_port()
    url = f"redis://{LOOPBACK}:{port}/0"
    server = ServerProcess(
        "redis-server (restartable)",
        ["redis-server", "--bind", LOOPBACK, "--port", str(port), "--dir", str(tmp_path), "--appendonly", "yes",
         "--appendfsync", "always", "--save", ""],
        tmp_path / "redis.log", ready=lambda: readiness.redis_ping(url),
    )
    server.start(timeout=20)
    yield RedisServer(server, port)
    server.stop()


@pytest.mark.slow
def test_redis_restart_mid_run_loses_nothing(
    restartable_redis: RedisServer, distributor_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from harvester.settings import get_settings

    env = {**distributor_env, "HARVESTER_REDIS_URL": restartable_redis.url, "HARVESTER_QUEUED_LEASE_SECONDS": "4",
           "HARVESTER_PUBLISH_GRACE_SECONDS": "3"}
    monkeypatch.setenv("HARVESTER_REDIS_URL", restartable_redis.url)
    get_settings.cache_clear()
    settings = get_settings()
    client = restartable_redis.client()
    source = make_source("shop", retries=5, rate_limit={"max_active": 50, "per_minute": 100_000})
    intake = Intake(client, settings)
    intake.register_source(source)
    intake.push_raw("shop", ["broken"])  # at the front: the first admission meets it
    intake.push(source, tasks("shop", 120))
    log_path = tmp_path / "distributor.log"
    process = start_distributor(env, log_path)
    try:
        wait_for(lambda: len(published_tasks(client, "default")) == 50, 20, "first admissions")
        before = RateLimitStore(client, settings).stats(["shop"])["shop"]
        assert (before.active, before.pending, before.dead_letters_waiting) == (50, 70, 1)

        restartable_redis.server.stop(signal.SIGKILL)  # a crash, not a clean shutdown
        time.sleep(1.5)  # the distributor meets the outage
        restartable_redis.server.start(timeout=20)
        client = restartable_redis.client()
        store = RateLimitStore(client, settings)
        after = store.stats(["shop"])["shop"]
        assert (after.pending, after.dead_letters_waiting) == (70, 1)  # intake and dead letters came back (AOF)
        assert after.active == 50  # so did the reservations of the published tasks (no worker started them)

        # no worker ever ran: nothing was charged. Once the queued reservations run out (their messages
        # presumed lost) the tasks return to intake with attempt 0 and are admitted again under new tokens.
        def readmitted() -> bool:
            published = published_tasks(client, "default")
            return len(published) == 100 and len({task["lease_token"] for task in published}) == 100
        wait_for(readmitted, 30, "re-admission of expired reservations")
        assert {task["attempt"] for task in published_tasks(client, "default")} == {0}
        intake = Intake(client, settings)
        intake.push(source, tasks("shop", 1, depth=9))  # the service still answers new intake
        wait_for(lambda: store.stats(["shop"])["shop"].admitted >= 101, 15, "admission after restart")
    finally:
        assert stop(process) == 0
    log = log_path.read_text()
    assert log.count("Redis unavailable") == 1, log
    assert log.count("Redis reachable again") == 1, log
    assert "Traceback" not in log
