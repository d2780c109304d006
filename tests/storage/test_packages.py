"""PackageStore against a real MongoDB-wire server: idempotent creation, atomic claims, count-down."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pymongo
import pytest
from harvester.storage.packages import PackageStatus, PackageStore, PackageTask, planned_task_id

pytestmark = pytest.mark.integration


@pytest.fixture
def store(mongo_server, mongo_database: str) -> Iterator[PackageStore]:
    client: pymongo.MongoClient = mongo_server.client()
    package_store = PackageStore(client[mongo_database])
    package_store.ensure_indexes()
    yield package_store
    client.close()


def _ids(package_id: int, urls: list[str], run_id: str = "run1") -> list[str]:
    return [planned_task_id("shop", run_id, package_id, url) for url in urls]


def test_planned_task_ids_are_deterministic_and_distinct() -> None:
    assert planned_task_id("shop", "r", 0, "http://a/1") == planned_task_id("shop", "r", 0, "http://a/1")
    assert planned_task_id("shop", "r", 0, "http://a/1") != planned_task_id("shop", "r2", 0, "http://a/1")


def test_create_is_idempotent_through_the_unique_index(store: PackageStore) -> None:
    packages = [(0, ["http://a/1", "http://a/2"]), (1, ["http://a/3"])]
    assert store.create_packages("shop", "run1", packages) == 2
    assert store.create_packages("shop", "run1", packages) == 0
    assert store.collection.count_documents({}) == 2
    assert store.last_package_id("shop", "run1") == 1
    assert store.planned_urls("shop", "run1") == {"http://a/1", "http://a/2", "http://a/3"}


def test_claims_never_hand_the_same_package_to_two_producers(store: PackageStore) -> None:
    store.create_packages("shop", "run1", [(i, [f"http://a/{i}"]) for i in range(20)])
    won: list[list[int]] = []

    def claimer() -> None:
        mine: list[int] = []
        while batch := store.claim("shop", "run1", 3):
            mine.extend(document["package_id"] for document in batch)
        won.append(mine)

    threads = [threading.Thread(target=claimer) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [package_id for mine in won for package_id in mine]
    assert sorted(claimed) == list(range(20))
    assert store.status_counts("shop", "run1")[PackageStatus.RUNNING] == 20


def test_count_down_finishes_once_and_discovered_tasks_keep_it_open(store: PackageStore) -> None:
    store.create_packages("shop", "run1", [(0, ["http://a/list"])])
    tasks = _ids(0, ["http://a/list"])
    assert store.collection.find_one({"package_id": 0})["pending"] == tasks
    store.claim("shop", "run1", 10)
    store.add_tasks("shop", "run1", 0, ["d1", "d2"])
    assert store.complete_tasks("shop", "run1", 0, [tasks[0]]) is False
    assert store.complete_tasks("shop", "run1", 0, ["d1"]) is False
    assert store.complete_tasks("shop", "run1", 0, ["d2"], failed=True) is True
    assert store.complete_tasks("shop", "run1", 0, ["d2"], failed=True) is False  # only one caller sees True
    document = store.collection.find_one({"package_id": 0})
    assert document["status"] == PackageStatus.FINISHED
    assert sorted(document["done"]) == sorted([tasks[0], "d1"])
    assert document["failed"] == ["d2"]
    # A listing delivered twice re-adds tasks that are already settled: nothing re-opens.
    store.add_tasks("shop", "run1", 0, ["d1", "d2"])
    assert store.collection.find_one({"package_id": 0})["status"] == PackageStatus.FINISHED
    # Genuinely new work re-opens a finished package.
    store.add_tasks("shop", "run1", 0, ["d3"])
    assert store.collection.find_one({"package_id": 0})["status"] == PackageStatus.RUNNING
    assert store.complete_tasks("shop", "run1", 0, ["d3"]) is True
    assert store.task_counts("shop", "run1") == {
        "planned": 1, "discovered": 3, "pending": 0, "done": 3, "failed": 1, "lost": 0,
    }


def test_unknown_package_or_empty_ids_are_ignored(store: PackageStore) -> None:
    assert store.complete_tasks("shop", "nope", 7, ["x"]) is False
    assert store.complete_tasks("shop", "nope", 7, []) is False
    store.add_tasks("shop", "nope", 7, ["x"])
    assert store.collection.count_documents({}) == 0


def test_reset_returns_a_stale_package_to_waiting_and_drops_lost_discoveries(store: PackageStore) -> None:
    store.create_packages("shop", "run1", [(0, ["http://a/1", "http://a/2"])])
    tasks = _ids(0, ["http://a/1", "http://a/2"])
    [claimed] = store.claim("shop", "run1", 1)
    store.add_tasks("shop", "run1", 0, ["lost-detail"])
    store.complete_tasks("shop", "run1", 0, [tasks[0]])
    assert store.reset_to_waiting("shop", "run1", 0, "someone-else", []) is False  # claim token guards
    assert store.reset_to_waiting("shop", "run1", 0, claimed["claim"], ["lost-detail"], [tasks[0]]) is True
    document = store.collection.find_one({"package_id": 0})
    assert document["status"] == PackageStatus.WAITING
    assert sorted(document["pending"]) == sorted(tasks) and document["done"] == []  # the listing goes again
    assert document["lost"] == 1 and document["failed"] == []
    # Rediscovered, the lost task is taken again (it never failed).
    store.add_tasks("shop", "run1", 0, ["lost-detail"])
    assert "lost-detail" in store.collection.find_one({"package_id": 0})["pending"]


def test_settle_dead_counts_dead_letters_as_failed(store: PackageStore) -> None:
    store.create_packages("shop", "run1", [(0, ["http://a/1", "http://a/2"])])
    tasks = _ids(0, ["http://a/1", "http://a/2"])
    store.claim("shop", "run1", 1)
    store.complete_tasks("shop", "run1", 0, [tasks[0]])
    assert store.settle_dead("shop", "run1", {0: {tasks[1]}}) == 1
    assert store.collection.find_one({"package_id": 0})["status"] == PackageStatus.FINISHED


def test_packages_built_by_hand_from_package_tasks(store: PackageStore) -> None:
    seed = PackageTask(planned_task_id("shop", "run1", 0, "http://a/shop"), "http://a/shop", "listing", 0)
    assert store.create_packages("shop", "run1", [(0, [seed])]) == 1
    document = store.collection.find_one({"package_id": 0})
    assert (document["kind"], document["urls"], document["pending"]) == ("listing", ["http://a/shop"], [seed.task_id])


def test_settle_dead_touches_only_tasks_still_pending(store: PackageStore) -> None:
    tasks = _ids(0, ["http://a/1", "http://a/2", "http://a/3"])
    store.create_packages("shop", "run1", [(0, ["http://a/1", "http://a/2", "http://a/3"])])
    store.complete_tasks("shop", "run1", 0, [tasks[0]])
    assert store.settle_dead("shop", "run1", {0: {tasks[0], tasks[1]}, 7: {"unknown"}}) == 1
    document = store.collection.find_one({"package_id": 0})
    assert document["failed"] == [tasks[1]] and document["done"] == [tasks[0]] and document["pending"] == [tasks[2]]
    assert store.settle_dead("shop", "run1", {0: {tasks[1]}}) == 0  # already settled: no write


def test_a_package_left_with_nothing_pending_is_finished_not_stuck(store: PackageStore) -> None:
    tasks = _ids(0, ["http://a/1"])
    store.create_packages("shop", "run1", [(0, ["http://a/1"]), (1, ["http://a/2"])])
    [first, _] = store.claim("shop", "run1", 2)
    # A worker died between pulling its last task and marking the package finished.
    store.collection.update_one({"package_id": 0}, {"$set": {"pending": [], "done": tasks}})
    assert store.finish_empty("shop", "run1") == 1
    assert store.collection.find_one({"package_id": 0})["status"] == PackageStatus.FINISHED
    # Resume of a running package with nothing pending finishes it instead of re-queueing nothing.
    store.collection.update_one({"package_id": 1}, {"$set": {"pending": []}})
    second = store.collection.find_one({"package_id": 1})
    assert store.reset_to_waiting("shop", "run1", 1, second["claim"], []) is True
    assert store.collection.find_one({"package_id": 1})["status"] == PackageStatus.FINISHED
    assert first["package_id"] == 0
