"""Produce and resume against real Redis (the distributor's Intake) and a real MongoDB-wire server."""

from __future__ import annotations

import json
import time

import pytest
from harvester.distributor.intake import Intake
from harvester.distributor.messages import TaskMessage
from harvester.distributor.store import RateLimitStore
from harvester.producer.planner import Planner, PlanOptions
from harvester.producer.producer import Producer
from harvester.producer.progress import RunMonitor, RunSettlement
from harvester.redis_keys import SourceKeys
from harvester.storage.packages import PackageStatus, PackageStore

pytestmark = pytest.mark.integration


@pytest.fixture
def database(mongo_client, mongo_database):
    return mongo_client[mongo_database]


@pytest.fixture
def planned(database, make_source):
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(10)])
    source = make_source(batch={"size": 3, "max_packages": 100})
    Planner(database, database, database).plan(source, "run1", PlanOptions.for_source(source))
    return source


def _intake_messages(redis_client, source: str) -> list[TaskMessage]:
    return [TaskMessage.from_json(raw) for raw in redis_client.lrange(SourceKeys(source).intake, 0, -1)]


def test_produce_claims_every_package_and_pushes_each_task_once(database, redis_client, harvester_settings,
                                                                 planned) -> None:
    producer = Producer(database, redis_client, Intake(redis_client, harvester_settings),
                        RateLimitStore(redis_client, harvester_settings), push_batch_size=4)
    result = producer.produce(planned, "run1")
    assert (result.packages_claimed, result.tasks_pushed, result.packages_reset) == (4, 10, 0)
    messages = _intake_messages(redis_client, "shop")
    assert sorted(m.url for m in messages) == sorted(f"http://shop.example/p/{i}" for i in range(10))
    assert {m.run_id for m in messages} == {"run1"} and {m.kind for m in messages} == {"details"}
    assert PackageStore(database).status_counts("shop", "run1")[PackageStatus.RUNNING] == 4
    # A second produce while the tasks are still queued changes nothing.
    again = producer.produce(planned, "run1")
    assert (again.packages_claimed, again.tasks_pushed, again.packages_reset) == (0, 0, 0)


def test_resume_repushes_only_packages_whose_tasks_vanished(database, redis_client, harvester_settings,
                                                            planned) -> None:
    store = PackageStore(database)
    producer = Producer.from_settings(harvester_settings, database, redis_client)
    producer.produce(planned, "run1")
    messages = _intake_messages(redis_client, "shop")
    by_package: dict[int, list[TaskMessage]] = {}
    for message in messages:
        by_package.setdefault(message.package_id, []).append(message)
    # Package 0 finished; package 1 half stored; then Redis loses everything (a crash before admission).
    store.complete_tasks("shop", "run1", 0, [m.task_id for m in by_package[0]])
    store.complete_tasks("shop", "run1", 1, [by_package[1][0].task_id])
    # Package 2's first task is leased by a live worker: the package stays running, that task is left to its
    # worker, and only its other tasks (nowhere in Redis now) are pushed again (never stranded).
    redis_client.delete(SourceKeys("shop").intake)
    redis_client.zadd(SourceKeys("shop").active, {by_package[2][0].task_id: 9e9})
    assert RateLimitStore(redis_client, harvester_settings).live_task_ids("shop", "run1") == {by_package[2][0].task_id}
    result = producer.produce(planned, "run1")
    assert result.packages_reset == 2  # packages 1 and 3
    assert result.packages_claimed == 2
    pushed = _intake_messages(redis_client, "shop")
    assert sorted(m.task_id for m in pushed) == sorted(
        [m.task_id for m in by_package[1][1:]] + [m.task_id for m in by_package[2][1:]]
        + [m.task_id for m in by_package[3]]
    )
    assert result.tasks_repushed == len(by_package[2]) - 1
    statuses = {p["package_id"]: p["status"] for p in database.packages.find()}
    assert statuses == {0: PackageStatus.FINISHED, 1: PackageStatus.RUNNING, 2: PackageStatus.RUNNING,
                        3: PackageStatus.RUNNING}


def test_dead_letters_settle_packages_and_show_in_progress(database, redis_client, harvester_settings,
                                                           planned) -> None:
    producer = Producer.from_settings(harvester_settings, database, redis_client)
    producer.produce(planned, "run1")
    messages = _intake_messages(redis_client, "shop")
    store = PackageStore(database)
    dead = messages[0]
    for message in messages[1:]:
        store.complete_tasks("shop", "run1", message.package_id, [message.task_id])
    database.shop.insert_many([{"url": m.url, "run_id": "run1"} for m in messages[1:]])
    keys = SourceKeys("shop")
    redis_client.rpush(keys.dead_letters, json.dumps(
        {"message": json.loads(dead.to_json()), "reason": "http 404: not found", "failed_at": 1.0}))
    redis_client.hincrby(keys.run_dead, "run1", 1)
    monitor = RunMonitor(database, database, redis_client)
    packages_before = list(database.packages.find({}, {"_id": 0}))
    unsettled = monitor.measure("shop", "shop", "run1")  # measuring reads only: the dead task is still pending
    assert not unsettled.complete and (unsettled.tasks_done, unsettled.tasks_failed) == (9, 0)
    assert unsettled.failures_by_reason == {"http 404": 1}  # what the dead letters say, settled or not
    assert list(database.packages.find({}, {"_id": 0})) == packages_before
    settlement = RunSettlement(database, database, redis_client)
    progress = settlement.settle_and_measure("shop", "shop", "run1")
    assert progress.complete
    assert (progress.tasks_done, progress.tasks_failed, progress.records_stored) == (9, 1, 9)
    assert progress.failures_by_reason == {"http 404": 1}
    assert "packages 4/4 done" in progress.line()
    assert database.runs.find_one({"run_id": "run1"})["status"] != "reported"  # settling is no report
    report = settlement.report("shop", "shop", "run1")
    assert report["records_stored"] == 9 and report["failures_by_reason"] == {"http 404": 1}
    assert database.runs.find_one({"run_id": "run1"})["status"] == "reported"
    # a reported run's progress (the Harvest progress tab) keeps its duration: its pages/min do not decay after it
    time.sleep(0.05)
    assert monitor.measure("shop", "shop", "run1").elapsed_seconds == report["duration_seconds"]
    # the run's dead-letter records stay until the next run reports: a cleared DAG run reports from them again
    assert redis_client.hexists(keys.run_dead, "run1")


def test_runs_command_lists_and_shows_a_run(database, redis_client, harvester_settings, planned, tmp_path,
                                            monkeypatch, capsys) -> None:
    import yaml
    from harvester.cli import main
    from harvester.settings import get_settings

    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "shop.yaml").write_text(yaml.safe_dump({
        "name": "shop", "input": {"kind": "details", "mongo": {"collection": "shop_input"}},
        "attributes": {"title": {"css": "h1::text"}}, "batch": {"size": 3}}))
    monkeypatch.setenv("HARVESTER_SOURCES_DIR", str(sources))
    get_settings.cache_clear()
    assert main(["runs", "list", "--source", "shop"]) == 0
    assert "run1  planned  10 URLs in 4 packages" in capsys.readouterr().out
    assert main(["runs", "show", "--source", "shop"]) == 0
    assert "shop run1: packages 0/4 done (0 running, 4 waiting)" in capsys.readouterr().out


def test_resume_after_redis_lost_discovered_tasks_fetches_their_listing_again(database, redis_client,
                                                                               harvester_settings, make_source) -> None:
    source = make_source(input={"kind": "listing", "seeds": ["http://shop.example/list"]},
                         listing={"link_selectors": ["a"]})
    Planner(database, database, database).plan(source, "run1", PlanOptions.for_source(source))
    producer = Producer.from_settings(harvester_settings, database, redis_client)
    producer.produce(source, "run1")
    [seed] = _intake_messages(redis_client, "shop")
    store = PackageStore(database)
    store.add_tasks("shop", "run1", 0, ["detail-1", "detail-2"])  # discovered and pushed ...
    store.complete_tasks("shop", "run1", 0, [seed.task_id])  # ... the listing stored ...
    store.complete_tasks("shop", "run1", 0, ["detail-1"])
    redis_client.flushall()  # ... then Redis lost its data (detail-2 with it)
    result = producer.produce(source, "run1")
    assert (result.packages_reset, result.tasks_lost, result.tasks_pushed) == (1, 1, 1)
    [again] = _intake_messages(redis_client, "shop")
    assert (again.task_id, again.kind, again.url) == (seed.task_id, "listing", "http://shop.example/list")
