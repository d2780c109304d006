"""The fault matrix of docs/reliability.md: one test per row, real processes (redis-server, the MongoDB server in
use, Celery workers, `harvester distributor`, the demo site), short leases and windows.

Every row asserts the same three promises (harness.Harvest.assert_every_row_holds): every record
stored exactly once, the site never saw more than ``max_active`` in flight nor more than
``per_minute`` starts in any window, and the run finishes on its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from harvester.distributor import DeadLetters
from harvester.redis_keys import SourceKeys
from harvester.settings import REPOSITORY_ROOT

from tests.fixtures.servers import VENV_BIN, MongoServer, RedisServer, ServerProcess, stop_together
from tests.reliability.harness import Harvest, assert_site_within_limits

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WorkerFactory = Callable[..., ServerProcess]


def pool_children(worker: ServerProcess) -> list[psutil.Process]:
    """The prefork pool processes of a Celery worker (the ones that run the batches)."""
    assert worker.process is not None
    try:
        return psutil.Process(worker.process.pid).children()
    except psutil.NoSuchProcess:
        return []


def kill_pool_children(worker: ServerProcess) -> int:
    children = pool_children(worker)
    for child in children:
        child.send_signal(signal.SIGKILL)
    return len(children)


def fetching_now(harvest: Harvest) -> bool:
    return harvest.site.client_stats(harvest.source.name)["current"] > 0


@pytest.fixture
def harvest_in_flight(harvest_factory, celery_worker_factory: WorkerFactory,
                      start_distributor) -> Callable[..., tuple[Harvest, ServerProcess]]:
    """Start a harvest of 40 pages under a distributor and a worker of ``concurrency`` processes; it is returned
    with that worker once 8 records are stored (``mid_batch``: and a page is being fetched right now), the
    moment a row's fault strikes."""

    def start(name: str, delay: float = 0.3, concurrency: int = 2, mid_batch: bool = False,
              **harvest_options: Any) -> tuple[Harvest, ServerProcess]:
        harvest = harvest_factory(name, count=40, delay=delay, **harvest_options)
        start_distributor()
        worker = celery_worker_factory(queues="default", concurrency=concurrency)
        harvest.start()
        if mid_batch:
            harvest.wait_until(lambda: harvest.stored() >= 8 and fetching_now(harvest), 60, "mid-batch")
        else:
            harvest.wait_until(lambda: harvest.stored() >= 8, 60, "mid-harvest")
        return harvest, worker

    return start


# -- 1 ------------------------------------------------------------------------------------------------
def test_row_1_a_worker_process_sigkilled_mid_batch(harvest_in_flight) -> None:
    harvest, worker = harvest_in_flight("row1", delay=0.4, mid_batch=True)
    assert kill_pool_children(worker) >= 1  # the pool process running the batch dies as a crash would
    harvest.wait_finished(timeout=120)
    harvest.assert_every_row_holds()
    assert worker.alive()


# -- 2 ------------------------------------------------------------------------------------------------
def test_row_2_a_whole_worker_host_sigkilled_then_celery_redelivers(
        harvest_in_flight, celery_worker_factory: WorkerFactory) -> None:
    harvest, host = harvest_in_flight("row2", delay=0.4, mid_batch=True,
                                      overrides={"celery_visibility_timeout_seconds": 8, "queue_max_depth": 50})
    host.kill()  # SIGKILL of the whole process group: its unacked messages stay with kombu
    celery_worker_factory(queues="default", concurrency=2)
    harvest.wait_finished(timeout=120)
    # kombu hands the dead host's messages out again once the visibility timeout has passed
    harvest.wait_until(lambda: harvest.store.counters(harvest.source.name).get("stale_deliveries", 0) >= 1,
                       40, "the redelivered message to be dropped and counted", poll=0.5)
    seen = harvest.assert_every_row_holds()
    assert max(seen["paths"].values()) <= 2  # once by the dead host, once after its leases were reaped


# -- 3 ------------------------------------------------------------------------------------------------
def test_row_3_a_worker_sigstopped_past_its_lease_then_sigconted(
        harvest_in_flight, celery_worker_factory: WorkerFactory) -> None:
    harvest, stalled = harvest_in_flight("row3", delay=0.4, concurrency=1, mid_batch=True)  # the only worker fetches
    assert stalled.process is not None
    os.killpg(stalled.process.pid, signal.SIGSTOP)
    celery_worker_factory(queues="default", concurrency=1)
    # its leases expire and are given to the other worker: woken then, not after a fixed sleep (on a loaded machine
    # a fixed sleep could outlast the batch's Celery time limit, and the late holder be killed before it speaks)
    harvest.wait_until(lambda: harvest.store.counters(harvest.source.name).get("reaped", 0) >= 1,
                       harvest.settings.lease_seconds * 6, "the stalled worker's leases reaped")
    time.sleep(harvest.settings.lease_seconds * 0.5)  # and re-leased to the other worker
    os.killpg(stalled.process.pid, signal.SIGCONT)
    harvest.wait_finished(timeout=120)
    harvest.assert_every_row_holds()
    # the late holder was fenced off: a heartbeat, release or retry under its lost tokens counted stale, or its
    # pages were skipped as no longer held
    counters = harvest.store.counters(harvest.source.name)
    assert counters.get("stale", 0) + counters.get("outcome:lease_lost", 0) >= 1, counters


# -- 4 ------------------------------------------------------------------------------------------------
def test_row_4_a_distributor_killed_between_admission_and_publish(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor) -> None:
    harvest = harvest_factory("row4a", count=24, delay=0.2, retries=0,
                              rate_limit={"max_active": 12, "per_minute": 200})
    harvest.start()
    # A distributor admits (this process is that distributor) and dies before publishing anything.
    crashed = harvest.store.admit(harvest.source.name, 12)
    assert len(crashed.messages) == 12
    start_distributor()
    celery_worker_factory(queues="default", concurrency=2)
    harvest.wait_finished(timeout=120)
    harvest.assert_every_row_holds()
    assert DeadLetters(harvest.redis).count(harvest.source.name) == 0


def test_row_4_b_two_distributors_one_sigkilled(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor) -> None:
    harvest = harvest_factory("row4b", count=60, delay=0.2)
    doomed = start_distributor()
    start_distributor()
    celery_worker_factory(queues="default", concurrency=2)
    harvest.start()
    harvest.wait_until(lambda: harvest.stored() >= 10, 60, "mid-harvest")
    doomed.kill()
    harvest.wait_finished(timeout=120)
    harvest.assert_every_row_holds()


# -- 5 ------------------------------------------------------------------------------------------------
def test_row_5_a_redis_restarted_mid_harvest(harvest_in_flight, redis_server: RedisServer) -> None:
    harvest, _ = harvest_in_flight("row5a")
    redis_server.server.restart(timeout=30)  # SIGTERM (AOF flushed), then the same server again
    harvest.wait_finished(timeout=180)
    harvest.assert_every_row_holds()


def test_row_5_b_redis_unreachable_for_three_leases_mid_harvest(harvest_in_flight, redis_server: RedisServer) -> None:
    harvest, _ = harvest_in_flight("row5b")
    process = redis_server.server.process
    assert process is not None
    # Longer than the lease (every lease held when Redis went away has expired when it comes back, and the
    # reaper's first pass races the holders' first token calls: acquire_fetch.lua must refuse a token to a
    # lease that is gone) and longer than the Redis reconnect back-off: a window driven by those settings,
    # not by the clock (it was a fixed 30 s with a 6 s lease).
    unreachable_seconds = 3 * harvest.settings.lease_seconds
    assert unreachable_seconds > 2 * harvest.settings.redis_retry_max_seconds
    os.kill(process.pid, signal.SIGSTOP)  # connections hang, as when the network to Redis goes away
    try:
        time.sleep(unreachable_seconds)
    finally:
        os.kill(process.pid, signal.SIGCONT)
    harvest.wait_finished(timeout=240)
    harvest.assert_every_row_holds()


# -- 6 ------------------------------------------------------------------------------------------------
def test_row_6_a_mongodb_killed_and_restarted_mid_harvest(harvest_in_flight, mongo_server: MongoServer) -> None:
    if mongo_server.server is None:
        pytest.skip("the MongoDB server is external (HARVESTER_MONGO_URI): this test cannot restart it")
    harvest, _ = harvest_in_flight("row6a")
    if mongo_server.kind == "secantusdb":
        # The stand-in acknowledges writes it has not made durable: SIGKILL would lose acknowledged
        # records whatever the client does. It is stopped (SIGTERM, it flushes) and started again.
        mongo_server.server.stop()
    else:
        mongo_server.server.kill()  # mongod journals acknowledged writes: a crash loses none
    time.sleep(3)
    mongo_server.server.start(timeout=90)
    harvest.wait_finished(timeout=240)
    harvest.assert_every_row_holds()


# Row 6 b (MongoDB failing at the count-down) is tests/reliability/test_settle_order.py: it needs the
# count-down, and only the count-down, to fail, which a real server does when its packages are unreachable.


# -- 7 ------------------------------------------------------------------------------------------------
PRODUCE_SCRIPT = """
import sys
from harvester.config.loader import load_source_file
from harvester.distributor import Intake, RateLimitStore
from harvester.connections import mongo_client, redis_client
from harvester.producer.producer import Producer
from harvester.settings import get_settings
settings = get_settings()
source = load_source_file(settings.sources_dir / (sys.argv[1] + ".yaml"))
client = redis_client(settings=settings)
database = mongo_client(settings=settings)[settings.mongo_database]
print(Producer(database, client, Intake(client, settings), RateLimitStore(client, settings),
               push_batch_size=int(sys.argv[3])).produce(
    source, sys.argv[2]).to_dict(), flush=True)
"""


def run_produce(harvest: Harvest, push_batch_size: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", PRODUCE_SCRIPT, harvest.source.name, harvest.run_id,
                             str(push_batch_size)], cwd=REPOSITORY_ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def test_row_7_a_the_produce_task_process_killed_mid_push(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor) -> None:
    """The produce step of the DAG (Producer.produce, as ProduceOperator runs it) SIGKILLed while it
    pushes; Airflow's retry runs it again and the run still lands every record exactly once."""
    harvest = harvest_factory("row7a", count=2000, delay=0.0, package_size=50,
                              rate_limit={"max_active": 8, "per_minute": 2000})
    harvest.plan()
    keys = SourceKeys(harvest.source.name)
    first = run_produce(harvest, push_batch_size=5)
    harvest.wait_until(lambda: (harvest.redis.hget(keys.counters, "pushed") or b"0") not in (b"0", b""), 60,
                       "the first pushes", poll=0.002)
    first.kill()
    first.wait(10)
    pushed_before = int(harvest.redis.hget(keys.counters, "pushed") or 0)
    start_distributor()
    celery_worker_factory(queues="default", concurrency=2)
    retry = run_produce(harvest, push_batch_size=500)
    output, _ = retry.communicate(timeout=120)
    assert retry.returncode == 0, output.decode(errors="replace")
    harvest.wait_finished(timeout=180)
    harvest.assert_every_row_holds()
    assert pushed_before < len(harvest.urls)  # it really was killed mid-push


TRIGGER_SCRIPT = """
import asyncio, json, sys
from harvester.airflow.triggers import HarvestProgressTrigger
trigger = HarvestProgressTrigger(**json.loads(sys.argv[1]))
async def main():
    async for event in trigger.run():
        print("EVENT " + json.dumps(event.payload, default=str), flush=True)
        return
asyncio.run(main())
"""


def test_row_7_b_the_triggerer_restarted_while_the_sensor_is_deferred(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor, mongo_server: MongoServer) -> None:
    """The sensor's trigger runs in a triggerer process; it is SIGKILLed while deferred and a new
    triggerer resumes it from its serialised kwargs (what Airflow stores), and it fires once the run ends."""
    harvest = harvest_factory("row7b", count=40, delay=0.3)
    settings = harvest.settings
    kwargs = {"source": harvest.source.name, "run_id": harvest.run_id,
              "output_collection": harvest.source.output_collection, "database": settings.mongo_database,
              "output_database": settings.mongo_database, "poll_seconds": 0.5, "deadline": time.time() + 600}

    def triggerer() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", TRIGGER_SCRIPT, json.dumps(kwargs)], cwd=REPOSITORY_ROOT,
                                env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)

    harvest.start()
    first = triggerer()
    start_distributor()
    celery_worker_factory(queues="default", concurrency=2)
    harvest.wait_until(lambda: harvest.stored() >= 8, 60, "mid-harvest")
    assert first.poll() is None  # still deferred
    first.kill()
    first.wait(10)
    second = triggerer()
    output, _ = second.communicate(timeout=180)
    event_lines = [line for line in output.decode(errors="replace").splitlines() if line.startswith("EVENT ")]
    assert event_lines, output.decode(errors="replace")[-3000:]
    event = json.loads(event_lines[-1].removeprefix("EVENT "))
    assert event["status"] == "complete", event
    harvest.assert_every_row_holds()


# -- 8 ------------------------------------------------------------------------------------------------
def test_row_8_a_queue_backlog_longer_than_the_lease(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor) -> None:
    harvest = harvest_factory("row8", count=48, delay=1.5, rate_limit={"max_active": 24, "per_minute": 1000})
    start_distributor()
    celery_worker_factory(queues="default", concurrency=1)  # 6 messages of 4 queued, 1.5 s each: 9 s > lease
    harvest.start()
    harvest.wait_finished(timeout=180)
    seen = harvest.assert_every_row_holds()
    counters = harvest.store.counters(harvest.source.name)
    assert counters.get("reaped", 0) == 0, counters  # a queued task is never reaped as dead
    assert max(seen["paths"].values()) == 1, "a task waiting in the queue was fetched twice"


# -- 9 ------------------------------------------------------------------------------------------------
def test_row_9_a_poison_message_that_kills_its_worker(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor, demo_site) -> None:
    poison = f"{demo_site.url}/slow/4999?delay=2"
    good = [f"{demo_site.url}/slow/{number}?delay=0.2" for number in range(1, 20)]
    harvest = harvest_factory("row9", urls=[*good, poison], retries=3, overrides={"publish_batch_size": 1})
    start_distributor()
    worker = celery_worker_factory(queues="default", concurrency=1)
    harvest.start()
    poison_path = poison.removeprefix(demo_site.url)
    kills = 0

    def kill_whoever_fetches_the_poison() -> None:
        nonlocal kills
        fetched = harvest.site.requests_of(harvest.source.name)["paths"].get(poison_path, 0)
        # this message kills the pool process that runs it (as a segfault or the OOM killer would)
        if fetched > kills and kills < 5 and kill_pool_children(worker):
            kills += 1

    harvest.wait_finished(timeout=180, poll=0.1, during=kill_whoever_fetches_the_poison)
    entries = DeadLetters(harvest.redis).list(harvest.source.name)
    assert len(entries) == 1, [(entry.message["url"], entry.reason) for entry in entries]
    [entry] = entries
    assert entry.message["url"] == poison and "killed its worker" in entry.reason, entry
    assert kills == 2
    harvest.assert_packages_settled(failed=1)
    stored = {document["url"] for document in harvest.collection.find({}, {"url": 1})}
    assert stored == set(good)
    assert_site_within_limits(harvest.site, harvest.source.name, harvest.limits)


# -- 10 -----------------------------------------------------------------------------------------------
def test_row_10_eight_distributors_and_four_workers_on_one_source_for_thirteen_windows(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor) -> None:
    # 330 starts at 25 per window: thirteen full windows of contention at the rate limit. The window is 2 s here
    # (5 s in the other rows, a minute in production): as many windows for the site to check, in half the time;
    # the token margin (rate_window_margin_seconds, 1 s) stays what it is, for the token-to-site delay is not
    # shorter because the window is.
    harvest = harvest_factory("row10", count=330, delay=0.3, package_size=30,
                              rate_limit={"max_active": 6, "per_minute": 25}, overrides={"rate_window_seconds": 2})
    servers = [start_distributor() for _ in range(8)]
    servers += [celery_worker_factory(queues="default", concurrency=2) for _ in range(4)]
    started = time.monotonic()
    harvest.start()
    harvest.wait_finished(timeout=240)
    paced_windows = 330 // 25 - 2  # at most 25 starts in any window: 330 need more than twelve windows
    assert time.monotonic() - started >= paced_windows * harvest.settings.rate_window_seconds, "not paced"
    seen = harvest.assert_every_row_holds()
    assert seen["max_concurrent"] >= 2
    stop_together(servers)  # twelve processes: at once, not one after another as the fixtures would



# -- 11 -----------------------------------------------------------------------------------------------
def test_row_11_a_worker_main_process_killed_between_kombus_brpop_and_its_unacked_registration(
        harvest_factory, celery_worker_factory: WorkerFactory, start_distributor) -> None:
    """Five times a worker takes a message off the queue and dies before kombu registers it as unacknowledged
    (tests/reliability/kill_window_app.py): the message is gone, its four tasks hold all of max_active. Each
    time they come back to intake, uncharged, within two leases (queued_lease_seconds is ten minutes here), and
    the run finishes on a worker that lives."""
    harvest = harvest_factory("row11", count=24, delay=0.2,
                              overrides={"queued_lease_seconds": 600, "lost_message_check_seconds": 1})
    start_distributor()
    harvest.start()
    lease = float(harvest.settings.lease_seconds)
    dying_command = [str(VENV_BIN / "celery"), "-A", "tests.reliability.kill_window_app", "worker", "-Q", "default",
                     "--concurrency", "1", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
                     "--without-heartbeat"]
    tests_root = Path(__file__).resolve().parents[2]  # where tests.reliability.kill_window_app is imported from
    environment = {"PYTHONPATH": os.pathsep.join([str(tests_root), os.environ.get("PYTHONPATH", "")])}
    stalls: list[float] = []
    dead: list[ServerProcess] = []
    try:
        for kill in range(5):
            returned = harvest.store.counters(harvest.source.name).get("returned_lost_message", 0)
            worker = ServerProcess(f"dying worker {kill}", [*dying_command, "-n", f"dying{kill}@%h"],
                                   harvest.settings.sources_dir.parent / f"dying-{kill}.log", ready=lambda: True,
                                   env={**os.environ, **environment})
            worker.start()  # it dies as soon as it takes a message, often before it says it is ready
            dead.append(worker)
            harvest.wait_until(lambda worker=worker: not worker.alive(), 60, f"worker {kill} dying in kombu's window")
            died_at = time.monotonic()
            harvest.wait_until(
                lambda before=returned: harvest.store.counters(harvest.source.name).get("returned_lost_message", 0)
                > before, 2 * lease + 5, f"the tasks of worker {kill}'s lost message back in intake")
            stalls.append(time.monotonic() - died_at)
    finally:
        for worker in dead:  # the dead main process's pool children are in its process group
            if worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.process.pid, signal.SIGKILL)
    assert max(stalls) <= 2 * lease, stalls
    counters = harvest.store.counters(harvest.source.name)
    assert counters.get("reaped", 0) == 0 and counters.get("returned_lost_message", 0) >= 5 * 4, counters
    celery_worker_factory(queues="default", concurrency=2)
    harvest.wait_finished(timeout=120)
    harvest.assert_every_row_holds()
