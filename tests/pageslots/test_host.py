"""Page-slot hosting: real Chromium, a real Celery worker on pageslots.SG, the real distributor, the demo site.

The worker consumes ``pageslots,pageslots.SG`` exactly as `make run` starts it (prefork with one
long-lived child here; `make run` uses the solo pool): the browser it launches serves batch after batch.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from harvester.config.model import SourceConfig
from harvester.demo_site.app import product_facts
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.pageslots.host import BrowserHost, SlotState, page_slot_queues
from harvester.redis_keys import SourceKeys
from harvester.services.ports import free_port
from harvester.services.stack import LocalStack
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings
from harvester.storage.packages import PackageStatus, PackageStore, PackageTask, planned_task_id

from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.servers import ServerProcess

BLOCKED_TYPES = ["image", "font", "media", "stylesheet"]


def browser_source_document(base_url: str, name: str, **overrides: Any) -> dict[str, Any]:
    """A detail-page source rendered in SG page slots; title and sku only exist once JavaScript ran
    on the /js/ pages (on the plain /product/ pages they are in the HTML)."""
    document = demo_source_document(base_url, name)
    document.pop("listing")
    document.update({
        "render": "browser", "country": "SG", "input": {"kind": "details", "seeds": [f"{base_url}/product/1"]},
        "attributes": {"title": {"css": "h1.title::text", "required": True},
                       "sku": {"css": "span.sku::text", "required": True},
                       "price": {"css": "span.price::text", "type": "float"},
                       "released": {"css": "time.released::attr(datetime)", "type": "date"}},
        "output": {"key": ["sku"]}, "rate_limit": {"max_active": 2, "per_minute": 100_000},
        "blocked_resource_types": BLOCKED_TYPES, "retries": 1, "timeout": 10,
    })
    document.update(overrides)
    return document


# -- without Celery: the host itself ---------------------------------------------------------------
@pytest.mark.unit
def test_queues_of_page_slot_workers_are_pageslots_and_every_browser_country(tmp_path: Path) -> None:
    def source(name: str, **fields: Any) -> SourceConfig:
        return SourceConfig.model_validate({**browser_source_document("http://127.0.0.1:1", name), **fields})

    sources = [source("a", country="SG"), source("b", country="MY"), source("c", country="SG"),
               source("d", render="http", country=None)]
    assert page_slot_queues(sources) == ["pageslots", "pageslots.MY", "pageslots.SG"]
    assert page_slot_queues([]) == ["pageslots"]
    stack = LocalStack(root=REPOSITORY_ROOT, environ={"PATH": "/usr/bin", "HARVESTER_DEMO_SITE_URL": "http://x"})
    worker = next(service.command for service in stack.services() if service.name == "worker-pageslots")
    assert worker[worker.index("-Q") + 1] == "pageslots,pageslots.SG"  # include/sources/demo_shop_browser.yaml


@pytest.mark.integration
def test_host_renders_blocks_closes_blocked_pages_and_idles_out(demo_site) -> None:
    settings = HarvesterSettings(page_slot_idle_seconds=0.5, page_slot_retry_delay_seconds=0.05)
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "host_only"))

    async def scenario() -> None:
        async with BrowserHost(settings) as host:
            first = await host.render(f"{demo_site.url}/js/product/3", source)
            assert first.ok and "SKU-00003" in first.text and 'class="ready"' in first.text
            assert first.blocked_requests == 3  # the stylesheet, the font preload and the product photo
            assert host.states() == {"SG": SlotState.PAGE_READY}
            refused = await host.render(f"{demo_site.url}/blocked", source)
            assert refused.outcome == "blocked" and refused.status == 403
            assert host.states() == {"SG": SlotState.NO_PAGE}  # a blocked task closes the page
            assert host.browser_open and host.totals.blocked_closes == 1
            assert not await host.close_if_idle()
            await asyncio.sleep(0.6)
            assert await host.close_if_idle() and not host.browser_open
            assert host.totals.browser_launches == 1 and host.totals.transferred_bytes > 0
            assert host.totals.blocked_requests == {"stylesheet": 2, "font": 2, "image": 1}

    asyncio.run(scenario())
    assert demo_site.client_stats("host_only")["total"] == 2  # nothing blocked ever reached the site


# -- through Celery and the distributor ---------------------------------------------------------------
@pytest.fixture
def slot_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=30,
                              page_slot_retry_delay_seconds=0.05, page_slot_idle_seconds=5)


@pytest.fixture
def distributor(slot_settings: HarvesterSettings, start_distributor) -> ServerProcess:
    return start_distributor()


@pytest.fixture
def slot_worker(slot_settings: HarvesterSettings, celery_worker_factory, distributor) -> ServerProcess:
    """A page-slot worker from the shared factory (prefork, one long-lived child) fed by the distributor."""
    return celery_worker_factory(queues="pageslots,pageslots.SG", concurrency=1, name="pageslots")


@pytest.fixture
def start_stack_slot_worker(slot_settings: HarvesterSettings, distributor,
                            celery_worker_factory) -> Callable[[], ServerProcess]:
    """The worker-pageslots command exactly as `make run` builds it (solo pool, queues from the sources)."""

    def start() -> ServerProcess:
        stack = LocalStack(root=REPOSITORY_ROOT, environ=dict(os.environ))
        command = next(service.command for service in stack.services() if service.name == "worker-pageslots")
        return celery_worker_factory(name="worker-pageslots", command=command)

    return start


def write_source(settings: HarvesterSettings, document: dict[str, Any]) -> SourceConfig:
    (settings.sources_dir / f"{document['name']}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return SourceConfig.model_validate(document)


def browser_pids(worker: ServerProcess) -> set[int]:
    """Chromium browser processes (not its renderers or helpers) under the worker's process tree."""
    pids = set()
    for process in psutil.Process(worker.process.pid).children(recursive=True):  # type: ignore[union-attr]
        try:
            command = process.cmdline()
        except psutil.Error:
            continue
        if command and "chrom" in Path(command[0]).name and not any(a.startswith("--type=") for a in command):
            pids.add(process.pid)
    return pids


def wait_for(condition: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout}s: {what()}")


def idle(store: RateLimitStore, name: str) -> bool:
    stats = store.stats([name])[name]
    return stats.pending == 0 and stats.active == 0 and stats.delayed == 0


@pytest.mark.integration
@pytest.mark.slow
def test_browser_source_is_harvested_by_a_page_slot_worker_whose_browser_lives_on(
        slot_settings, slot_worker, demo_site, mongo_server, redis_client) -> None:
    source = write_source(slot_settings, browser_source_document(demo_site.url, "slot_shop"))
    database = mongo_server.client()[slot_settings.mongo_database]
    packages = PackageStore(database)
    packages.ensure_indexes()
    run_id = "run-slots"
    urls = [f"{demo_site.url}/js/product/{n}" for n in range(1, 11)] + [f"{demo_site.url}/product/{n}"
                                                                      for n in (11, 12)]
    tasks = [PackageTask(planned_task_id(source.name, run_id, 0, url), url, "details", 0) for url in urls]
    packages.create_packages(source.name, run_id, [(0, tasks)])
    intake, store = Intake(redis_client, slot_settings), RateLimitStore(redis_client, slot_settings)
    intake.push(source, [TaskMessage(task_id=task.task_id, source=source.name, kind="details", url=task.url,
                                     run_id=run_id, package_id=0, country="SG") for task in tasks])
    collection = database[source.output_collection]

    def package_status() -> int:
        return database["packages"].find_one({"source": source.name, "run_id": run_id})["status"]

    wait_for(lambda: package_status() == PackageStatus.FINISHED and idle(store, source.name), 60,
             lambda: f"{store.stats([source.name])}, {collection.count_documents({})} records")

    records = {record["sku"]: record for record in collection.find()}
    assert set(records) == {f"SKU-{n:05d}" for n in range(1, 13)}
    for number in range(1, 13):
        assert records[f"SKU-{number:05d}"]["title"] == product_facts(number)["title"]
        assert records[f"SKU-{number:05d}"]["price"] == product_facts(number)["price"]
    counters = store.counters(source.name)
    assert counters["outcome:records_stored"] == 12
    # every page loads a stylesheet, a font and a photo: all 36 aborted, none reached the site
    assert counters["outcome:browser_blocked_requests"] == 36
    assert {counters[f"outcome:browser_blocked:{kind}"] for kind in ("stylesheet", "font", "image")} == {12}
    assert counters["outcome:browser_transferred_bytes"] > 0
    assert demo_site.client_stats(source.name)["total"] == 12
    assert demo_site.client_stats(source.name)["max_concurrent"] == 1  # one page per slot, one slot

    first_browser = browser_pids(slot_worker)
    assert len(first_browser) == 1
    more = [f"{demo_site.url}/js/product/{n}" for n in (13, 14, 15)]
    intake.push(source, [TaskMessage(task_id=f"more-{n}", source=source.name, kind="details", url=url)
                         for n, url in enumerate(more)])
    wait_for(lambda: collection.count_documents({}) == 15 and idle(store, source.name), 30,
             lambda: f"{store.stats([source.name])}, {collection.count_documents({})} records")
    assert browser_pids(slot_worker) == first_browser  # the same Chromium served the later batches
    wait_for(lambda: not browser_pids(slot_worker), 20,  # HARVESTER_PAGE_SLOT_IDLE_SECONDS=5
             lambda: f"browser still open while idle: {browser_pids(slot_worker)}")


@pytest.mark.integration
@pytest.mark.slow
def test_a_page_that_never_loads_is_retried_in_the_slot_then_by_the_distributor_then_dead(
        slot_settings, start_stack_slot_worker, demo_site, redis_client) -> None:
    source = write_source(slot_settings, browser_source_document(demo_site.url, "slot_dead", timeout=5))
    write_source(slot_settings, browser_source_document(demo_site.url, "slot_elsewhere", country="MY"))
    worker = start_stack_slot_worker()
    assert worker.command[worker.command.index("-Q") + 1] == "pageslots,pageslots.MY,pageslots.SG"
    assert worker.command[worker.command.index("--pool") + 1] == "solo"
    dead_url = f"http://127.0.0.1:{free_port()}/product/1"  # nothing listens there: connection refused
    store = RateLimitStore(redis_client, slot_settings)
    Intake(redis_client, slot_settings).push(source, [
        TaskMessage(task_id="dead", source=source.name, kind="details", url=dead_url),
        TaskMessage(task_id="alive", source=source.name, kind="details", url=f"{demo_site.url}/js/product/7"),
    ])
    wait_for(lambda: idle(store, source.name) and redis_client.llen(SourceKeys(source.name).dead_letters) == 1,
             60, lambda: f"{store.stats([source.name])}")

    letter = json.loads(redis_client.lindex(SourceKeys(source.name).dead_letters, 0))
    assert letter["message"]["task_id"] == "dead"
    assert "ERR_CONNECTION_REFUSED" in letter["reason"]
    assert "page slot gave up after 7 consecutive failed loads" in letter["reason"]
    counters = store.counters(source.name)
    # retries: 1 -> two admissions, each 7 loads in the slot, the browser re-launched after the 4th
    assert counters["outcome:browser_failed_loads"] == 14
    assert counters["outcome:browser_gave_up"] == 2
    assert counters["outcome:browser_relaunches"] == 2
    assert counters["outcome:records_stored"] == 1  # the good page of the same source still lands


@pytest.mark.integration
def test_a_crashed_browser_is_relaunched_by_the_next_load(demo_site) -> None:
    settings = HarvesterSettings(page_slot_retry_delay_seconds=0.05)
    source = SourceConfig.model_validate(browser_source_document(demo_site.url, "host_crash"))

    def own_browsers() -> list[psutil.Process]:
        return [process for process in psutil.Process().children(recursive=True)
                if "chrom" in process.name() and not any(a.startswith("--type=") for a in process.cmdline())]

    async def scenario() -> None:
        async with BrowserHost(settings) as host:
            assert (await host.render(f"{demo_site.url}/js/product/4", source)).ok
            (browser,) = own_browsers()
            browser.kill()
            browser.wait(timeout=10)
            again = await host.render(f"{demo_site.url}/js/product/5", source)
            assert again.ok and "SKU-00005" in again.text
            assert host.totals.browser_launches == 2
            assert host.totals.failed_loads <= 1  # at most the load that found the dead browser
            assert [process.pid for process in own_browsers()] != [browser.pid]

    asyncio.run(scenario())
