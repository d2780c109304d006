"""A round reads only the sources with work (harvester.distributor.ready_work), and never loses one."""

from __future__ import annotations

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.distributor.service import Distributor
from harvester.redis_keys import SOURCES_WITH_WORK, SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import held_messages, published_tasks

pytestmark = pytest.mark.integration

LIMITS = {"max_active": 10_000, "per_minute": 1_000_000}


def tasks(source: str, count: int, first: int = 0) -> list[TaskMessage]:
    return [TaskMessage(source=source, url=f"http://{source}.test/{i}") for i in range(first, first + count)]


def with_work(client: redis.Redis) -> set[str]:
    return {name.decode() for name in client.smembers(SOURCES_WITH_WORK)}


def calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_round_reads_only_the_sources_with_work(redis_client: redis.Redis, settings: HarvesterSettings):
    """40 registered sources, 2 with work: after the first round's sweep, a round reads those 2 (it read all
    40, three commands each, every round: admission_ratio_5000 in docs/benchmarks.md)."""
    intake = Intake(redis_client, settings)
    for index in range(40):
        intake.register_source(make_source(f"source_{index:02d}", rate_limit=LIMITS))
    intake.push(make_source("source_07", rate_limit=LIMITS), tasks("source_07", 50))
    intake.push(make_source("source_31", rate_limit=LIMITS), tasks("source_31", 50))
    distributor = Distributor(redis_client, settings.model_copy(update={"admit_batch_size": 10}))

    distributor.run_round()  # the first round sweeps every source
    assert with_work(redis_client) == {"source_07", "source_31"}
    redis_client.config_resetstat()
    outcome = distributor.run_round()

    assert outcome.admitted == 20
    assert calls(redis_client, "zcount") == 2  # one per source with work, not one per registered source


def test_a_source_emptied_leaves_the_set_and_its_next_push_brings_it_back(redis_client: redis.Redis,
                                                                          settings: HarvesterSettings):
    source = make_source("shop", rate_limit=LIMITS)
    intake = Intake(redis_client, settings)
    intake.push(source, tasks("shop", 5))
    assert with_work(redis_client) == {"shop"}  # the push added it
    distributor = Distributor(redis_client, settings)
    assert distributor.run_round().admitted == 5
    distributor.run_round()  # nothing left: the round finds it idle
    assert with_work(redis_client) == set()

    intake.push("shop", tasks("shop", 3, first=5))
    assert with_work(redis_client) == {"shop"}
    assert distributor.run_round().admitted == 3
    assert len(published_tasks(redis_client, source.queue)) == 8


def test_a_push_that_races_the_removal_is_not_lost(redis_client: redis.Redis, settings: HarvesterSettings):
    """The push wrote the list and added the source before the removal took it out: the look after the
    removal sees the list and puts it back."""
    distributor = Distributor(redis_client, settings)
    Intake(redis_client, settings).push(make_source("shop", rate_limit=LIMITS), tasks("shop", 1))
    assert distributor.ready_work.drop_idle(["shop", "idle"]) == ["shop"]
    assert with_work(redis_client) == {"shop"}


def test_work_written_behind_the_sets_back_is_found_by_the_sweep(redis_client: redis.Redis,
                                                                  settings: HarvesterSettings):
    """A task a tool pushed straight into the list (or one from before the set existed) waits for the sweep
    (every WORK_SWEEP_SECONDS, at start and after an outage), never forever."""
    source = make_source("shop", rate_limit=LIMITS)
    Intake(redis_client, settings).register_source(source)
    distributor = Distributor(redis_client, settings)
    distributor.run_round()  # the start's sweep: nothing yet
    redis_client.rpush(SourceKeys("shop").intake, tasks("shop", 1)[0].to_json())
    assert distributor.run_round().admitted == 0  # not in the set: not read
    distributor.ready_work.sweep_soon()
    assert distributor.run_round().admitted == 1
    assert with_work(redis_client) == {"shop"}  # the sweep added it
    distributor.run_round()
    assert with_work(redis_client) == set()  # all admitted: the next look finds it idle


def test_a_source_with_only_a_delayed_retry_stays_and_wakes_the_distributor_for_it(
        redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit=LIMITS, retries=3)
    Intake(redis_client, settings).push(source, tasks("shop", 1))
    store = RateLimitStore(redis_client, settings)
    distributor = Distributor(redis_client, settings)
    [message] = held_messages(store.admit("shop", 1))  # as a worker holds it: admitted, then failed
    assert distributor.ready_work.drop_idle(["shop"]) == []
    assert with_work(redis_client) == set()
    store.fail(message, "connection_error", retry_after=5)
    assert with_work(redis_client) == {"shop"}  # the retry is work to come

    outcome = distributor.run_round()
    assert outcome.admitted == 0 and with_work(redis_client) == {"shop"}
    assert outcome.wait_seconds is not None and 4 < outcome.wait_seconds <= 5


def test_a_release_frees_room_without_adding_its_source(redis_client: redis.Redis, settings: HarvesterSettings):
    Intake(redis_client, settings).push(make_source("shop", rate_limit=LIMITS), tasks("shop", 1))
    store = RateLimitStore(redis_client, settings)
    [message] = held_messages(store.admit("shop", 1))
    redis_client.srem(SOURCES_WITH_WORK, "shop")
    assert store.release("shop", {message.task_id: str(message.lease_token)}) == 1
    assert with_work(redis_client) == set()


def test_the_reaper_looks_only_at_the_sources_with_leases(redis_client: redis.Redis, settings: HarvesterSettings):
    """A reap called reap.lua on every registered source every reap_interval_seconds (0.6 s at 5,000 idle
    sources); after the start's sweep it calls it on those with reservations or leases, which admission adds."""
    import time

    from harvester.redis_keys import SOURCES_WITH_LEASES

    intake = Intake(redis_client, settings)
    for index in range(40):
        intake.register_source(make_source(f"source_{index:02d}", rate_limit=LIMITS))
    intake.push(make_source("source_07", rate_limit=LIMITS), tasks("source_07", 1))
    distributor = Distributor(redis_client, settings)
    assert distributor.reap() == 0  # the sweep: every source looked at, none has leases
    assert redis_client.smembers(SOURCES_WITH_LEASES) == set()
    store = RateLimitStore(redis_client, settings)
    [message] = held_messages(store.admit("source_07", 1))
    assert {name.decode() for name in redis_client.smembers(SOURCES_WITH_LEASES)} == {"source_07"}
    store.start("source_07", {message.task_id: str(message.lease_token)}, now=time.time() - 100)  # expired

    redis_client.config_resetstat()
    assert distributor.reap() == 1
    assert int(redis_client.info("commandstats")["cmdstat_evalsha"]["calls"]) == 1  # one source, not 40
    assert redis_client.smembers(SOURCES_WITH_LEASES) == set()  # its lease reaped: nothing left to look at
    assert redis_client.llen(SourceKeys("source_07").intake) == 1  # back for another attempt


def test_leases_written_behind_the_sets_back_are_reaped_at_the_sweep(redis_client: redis.Redis,
                                                                     settings: HarvesterSettings):
    import time

    from harvester.redis_keys import SOURCES_WITH_LEASES

    Intake(redis_client, settings).push(make_source("shop", rate_limit=LIMITS), tasks("shop", 1))
    store = RateLimitStore(redis_client, settings)
    [message] = held_messages(store.admit("shop", 1))
    store.start("shop", {message.task_id: str(message.lease_token)}, now=time.time() - 100)
    redis_client.delete(SOURCES_WITH_LEASES)  # an older Harvester's leases, or a lost reply
    distributor = Distributor(redis_client, settings)
    distributor.reap()  # the start's sweep
    assert redis_client.llen(SourceKeys("shop").intake) == 1
