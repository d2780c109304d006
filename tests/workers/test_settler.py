"""The settler against real Redis and MongoDB: one write per run, then count down, then release."""

from __future__ import annotations

import pymongo
import pytest
from harvester.distributor import DeadLetters, TaskMessage
from harvester.scraping.extraction.extractor import Extraction
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.scraping.page import PageResult
from harvester.services.ports import free_port
from harvester.storage.data_handler import DataHandler
from harvester.storage.packages import PackageStatus, PackageTask
from harvester.workers.clients import WorkerClients
from harvester.workers.failures import FailurePolicy
from harvester.workers.report import BatchReport
from harvester.workers.settler import Settler

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration
BASE = "http://shop.example"


@pytest.fixture
def clients(configure_settings, redis_client) -> WorkerClients:
    return WorkerClients(configure_settings(retry_base_seconds=0.05, retry_max_seconds=0.1), redis_client)


def settler_of(clients: WorkerClients, data: DataHandler | None = None) -> Settler:
    settler = Settler.from_settings(clients.settings, clients, FailurePolicy.from_settings(clients.settings, clients))
    if data is not None:
        settler.data = data
    return settler


def admit(clients: WorkerClients, source, messages: list[TaskMessage]) -> list[TaskMessage]:
    clients.intake.push(source, messages)
    admission = clients.store.admit(source.name, len(messages))
    assert len(admission.messages) == len(messages)
    return admission.task_messages()


def detail_page(message: TaskMessage, record: dict) -> tuple[TaskMessage, PageResult]:
    fetch = FetchResult(message.url, "ok", final_url=message.url, status=200)
    return message, PageResult(fetch, "details", message.url, extraction=Extraction(record=record))


def test_one_write_per_run_marks_urls_seen_and_returns_what_is_stored(clients, mongo_server) -> None:
    source = demo_source(BASE, "settled")
    messages = admit(clients, source, [
        TaskMessage(task_id=f"t{n}", source=source.name, url=f"{BASE}/product/{n}", run_id=run)
        for n, run in ((1, "r1"), (2, "r1"), (3, "r2"))])
    report = BatchReport(source.name)
    items = [detail_page(message, {"url": message.url, "sku": message.task_id}) for message in messages]
    stored = settler_of(clients).write(source, items, report)
    assert stored == messages and report.stored == 3 and report.outcomes["records_stored"] == 3
    collection = mongo_server.client()[clients.settings.mongo_database][source.output_collection]
    assert {document["url"]: document["run_id"] for document in collection.find()} == {
        f"{BASE}/product/1": "r1", f"{BASE}/product/2": "r1", f"{BASE}/product/3": "r2"}
    assert set(clients.urls.seen(source, [message.url for message in messages]).values()) == {True}
    assert clients.store.stats([source.name])[source.name].active == 3  # writing releases nothing


def test_a_record_the_output_cannot_key_is_dead_lettered(clients, mongo_server) -> None:
    source = demo_source(BASE, "keyed", output={"key": ["sku"]})
    good, keyless = admit(clients, source, [TaskMessage(task_id=name, source=source.name, url=f"{BASE}/p/{name}")
                                            for name in ("good", "keyless")])
    report = BatchReport(source.name)
    stored = settler_of(clients).write(source, [detail_page(good, {"url": good.url, "sku": "S1"}),
                                                detail_page(keyless, {"url": keyless.url, "sku": None})], report)
    assert stored == [good] and (report.stored, report.dead, report.outcomes["rejected"]) == (1, 1, 1)
    (letter,) = DeadLetters(clients.redis).list(source.name)
    assert letter.reason == "record rejected: output key field(s) missing: sku"


def test_an_unreachable_output_sends_every_task_back(clients) -> None:
    source = demo_source(BASE, "unreachable")
    messages = admit(clients, source, [TaskMessage(task_id=f"t{n}", source=source.name, url=f"{BASE}/p/{n}")
                                       for n in range(2)])
    dead_server = pymongo.MongoClient(f"mongodb://127.0.0.1:{free_port()}/?directConnection=true",
                                      serverSelectionTimeoutMS=300, connectTimeoutMS=300)
    report = BatchReport(source.name)
    try:
        settler = settler_of(clients, DataHandler(clients.settings, client=dead_server))
        stored = settler.write(source, [detail_page(m, {"url": m.url}) for m in messages], report)
    finally:
        dead_server.close()
    assert stored == [] and (report.stored, report.retried, report.outcomes["storage_error"]) == (0, 2, 2)
    assert clients.urls.seen(source, [m.url for m in messages]) == dict.fromkeys([m.url for m in messages], False)
    stats = clients.store.stats([source.name])[source.name]
    assert (stats.active, stats.delayed) == (0, 2)


def test_complete_counts_packages_down_then_releases(clients, mongo_server) -> None:
    source = demo_source(BASE, "completed")
    packages = clients.packages
    packages.ensure_indexes()
    tasks = [PackageTask(f"t{n}", f"{BASE}/p/{n}", "details", 0) for n in range(3)]
    packages.create_packages(source.name, "run", [(0, tasks[:2]), (1, tasks[2:])])
    messages = admit(clients, source, [TaskMessage(task_id=task.task_id, source=source.name, url=task.url,
                                                   run_id="run", package_id=0 if n < 2 else 1)
                                       for n, task in enumerate(tasks)])
    settler_of(clients).complete(source, messages)
    assert clients.store.stats([source.name])[source.name].active == 0
    statuses = {document["package_id"]: document["status"]
                for document in mongo_server.client()[clients.settings.mongo_database]["packages"].find()}
    assert statuses == {0: PackageStatus.FINISHED, 1: PackageStatus.FINISHED}


def test_a_failed_count_down_hands_the_task_back_instead_of_releasing_it(clients) -> None:
    """Count down first, release after: a package store that fails never strands a package,
    the task goes back for a retry (its record is an upsert) and is not counted done."""
    source = demo_source(BASE, "ordered")
    (message,) = admit(clients, source, [TaskMessage(task_id="t", source=source.name, url=f"{BASE}/p",
                                                     run_id="run", package_id=0)])

    def unreachable_packages():
        raise pymongo.errors.ServerSelectionTimeoutError("package store down")

    settler = Settler(clients.store, clients.data, clients.urls, unreachable_packages,
                      FailurePolicy(clients.store, unreachable_packages))
    report = BatchReport(source=source.name)
    clients.store.start(source.name, {message.task_id: message.lease_token})
    settler.complete(source, [message], report)
    stats = clients.store.stats([source.name])[source.name]
    assert (stats.active, stats.done, stats.delayed) == (0, 0, 1)  # not released as done: retried
    assert report.outcomes["count_down_failed"] == 1 and report.retried == 1
