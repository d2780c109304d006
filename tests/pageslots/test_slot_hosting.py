"""Page slots end to end: real Redis, a real Celery slot host on `pageslots`, real Chromium, the demo site,
the distributor, MongoDB and a counting forward proxy per country on loopback.

The allocator's jobs are called as the page_slots DAG calls them (tests/pageslots/test_dag.py runs the DAG).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psutil
import pytest
import yaml
from harvester.config.model import SourceConfig
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.pageslots.allocation import allocate_page_slots
from harvester.pageslots.bookkeeping import country_tasks
from harvester.pageslots.host import OWNER_FLAG, SLOT_FLAG
from harvester.pageslots.manager import PageSlotManager
from harvester.pageslots.registry import SlotHosts, SlotRegistry, SlotState, slot_counts
from harvester.redis_keys import PageSlotKeys, SourceKeys
from harvester.settings import HarvesterSettings
from harvester_demo.app import product_facts

from tests.fixtures.demo_site import demo_source_document

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEYS = PageSlotKeys()
BLOCKED_TYPES = ["image", "font", "media", "stylesheet"]


def browser_source_document(base_url: str, name: str, country: str, **overrides: Any) -> dict[str, Any]:
    """Detail pages rendered in page slots of ``country``; /js/ pages only have their facts after JavaScript."""
    document = demo_source_document(base_url, name)
    document.pop("listing")
    document.update({
        "render": "browser", "country": country,
        "input": {"kind": "details", "seeds": [f"{base_url}/product/1"]},
        "attributes": {"title": {"css": "h1.title::text", "required": True},
                       "sku": {"css": "span.sku::text", "required": True},
                       "price": {"css": "span.price::text", "type": "float"}},
        "output": {"key": ["sku"]}, "rate_limit": {"max_active": 20, "per_minute": 100_000},
        "blocked_resource_types": BLOCKED_TYPES, "retries": 2, "timeout": 10,
    })
    document.update(overrides)
    return document


def write_source(settings: HarvesterSettings, document: dict[str, Any]) -> SourceConfig:
    (settings.sources_dir / f"{document['name']}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return SourceConfig.model_validate(document)


def wait_for(condition: Callable[[], bool], timeout: float, what: Callable[[], str],
             between: Callable[[], object] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if between is not None:
            between()
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout}s: {what()}")


def slot_processes() -> list[psutil.Process]:
    """Every Chromium process (browser, renderer, helpers) a slot of THIS test launched: other test runs on
    the machine launch slot browsers too, so one is ours when it inherited our Redis (HARVESTER_REDIS_URL)."""
    ours = os.environ.get("HARVESTER_REDIS_URL")
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(a.startswith(SLOT_FLAG) for a in process.info.get("cmdline") or []):
            with contextlib.suppress(psutil.Error):
                if process.environ().get("HARVESTER_REDIS_URL") == ours:
                    found.append(process)
    return found


def slot_browsers() -> list[psutil.Process]:
    """The browser processes (not renderers) among :func:`slot_processes`."""
    return [process for process in slot_processes()
            if any(a.startswith(OWNER_FLAG) for a in process.info.get("cmdline") or [])
            and not any(a.startswith("--type=") for a in process.info.get("cmdline") or [])]


def pids_of(processes: list[psutil.Process]) -> set[int]:
    return {process.pid for process in processes}


@pytest.fixture
def slot_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=10,
                              reap_interval_seconds=1, page_slot_retry_delay_seconds=0.05,
                              page_slot_heartbeat_seconds=1, page_slot_task_wait_seconds=0.3,
                              page_slot_idle_seconds=6, max_page_slots=20)


@pytest.fixture
def proxies(slot_settings: HarvesterSettings, forward_proxy_factory, monkeypatch: pytest.MonkeyPatch) -> dict:
    started = {country: forward_proxy_factory(country) for country in ("SG", "MY")}
    for country, proxy in started.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_PROXY_{country}", proxy.url)
    return started


def test_slots_follow_demand_through_their_country_proxy_idle_out_and_recover(
    slot_settings: HarvesterSettings, proxies: dict, demo_site, mongo_server, redis_client,
    celery_worker_factory, start_distributor,
) -> None:
    start_distributor()
    worker = celery_worker_factory(queues="pageslots", concurrency=3, name="slots")
    hosts = SlotHosts(redis_client)
    wait_for(lambda: hosts.live_capacity().slots == 3, 30, lambda: f"capacity {hosts.live_capacity()}")
    sg = write_source(slot_settings, browser_source_document(demo_site.url, "sg_shop", "SG"))
    my = write_source(slot_settings, browser_source_document(demo_site.url, "my_shop", "MY"))
    intake, store = Intake(redis_client, slot_settings), RateLimitStore(redis_client, slot_settings)
    manager = PageSlotManager(redis_client, slot_settings)
    registry = SlotRegistry(redis_client)
    database = mongo_server.client()[slot_settings.mongo_database]

    def run_jobs() -> None:  # what the page_slots DAG does every minute
        manager.allocate()
        manager.prepare()
        manager.close_idle()

    def push(source: SourceConfig, numbers: range) -> None:
        intake.push(source, [TaskMessage(task_id=f"{source.name}-{n}", source=source.name, kind="details",
                                         url=f"{demo_site.url}/js/product/{n}", country=source.country)
                             for n in numbers])

    def stored(source: SourceConfig) -> int:
        return database[source.output_collection].count_documents({})

    # 1. SG demand: every slot goes to SG and every SG page goes through the SG proxy.
    push(sg, range(1, 13))
    wait_for(lambda: redis_client.llen(KEYS.browser_tasks("SG")) > 0, 20, lambda: "no SG task reached its list")
    report = manager.allocate()
    assert slot_counts(registry.slots()) == {"SG": 3} and "SG 0 → 3 slots: +3 created" in report.story
    assert "3 started" in manager.prepare().story
    browsers_of_slots: dict[str, set[int]] = defaultdict(set)  # slot -> the browsers it ran, as recorded
    live_browsers: set[int] = set()  # slot browsers seen running (a slot that ran out of tasks may idle out)

    def note_browsers() -> None:
        for record in registry.slots():
            if record.browser_pid:
                browsers_of_slots[record.id].add(record.browser_pid)
        live_browsers.update(pids_of(slot_browsers()))

    wait_for(lambda: stored(sg) == 12, 90, lambda: f"{stored(sg)} SG records; {registry.slots()}",
             between=note_browsers)
    note_browsers()
    records = {r["sku"]: r for r in database[sg.output_collection].find()}
    assert all(records[f"SKU-{n:05d}"]["title"] == product_facts(n)["title"] for n in range(1, 13))
    sg_seen = proxies["SG"].stats()
    sg_pages = {url for url in sg_seen["urls"] if "/js/product/" in url}
    assert sg_pages == {f"{demo_site.url}/js/product/{n}" for n in range(1, 13)}
    assert proxies["MY"].stats()["requests"] == 0
    assert demo_site.client_stats("sg_shop")["total"] == 12  # blocked assets never reached the site
    counters = store.counters("sg_shop")
    assert counters["outcome:browser_blocked_requests"] == 36 and counters["outcome:browser_transferred_bytes"] > 0
    proxy_bytes = {k.decode(): int(v) for k, v in redis_client.hgetall(KEYS.proxy_bytes).items()}
    assert proxy_bytes["country:SG"] == proxy_bytes["source:sg_shop"] == counters["outcome:browser_transferred_bytes"]
    # one Chromium per slot, kept open across its tasks: 3 slots, one browser each, every one a live Chromium
    assert len(browsers_of_slots) == 3 and all(len(pids) == 1 for pids in browsers_of_slots.values()), browsers_of_slots
    assert set().union(*browsers_of_slots.values()) <= live_browsers, (browsers_of_slots, live_browsers)

    # 2. Demand shifts to MY: after allocator runs the counts follow the seed's formula.
    push(my, range(20, 32))
    wait_for(lambda: redis_client.llen(KEYS.browser_tasks("MY")) == 12, 20, lambda: "MY tasks not queued")
    run_jobs()
    census = {c: country_tasks(v) for c, v in manager.book.census().items()}
    expected = allocate_page_slots(census, 3)
    assert expected == {"SG": 1, "MY": 2}  # SG 12 completed x 10 = 120, MY 12 pending x 30 = 360
    assert slot_counts(registry.slots()) == expected
    wait_for(lambda: stored(my) == 12, 120, lambda: f"{stored(my)} MY records; {registry.slots()}", between=run_jobs)
    my_pages = {url for url in proxies["MY"].stats()["urls"] if "/js/product/" in url}
    assert my_pages == {f"{demo_site.url}/js/product/{n}" for n in range(20, 32)}
    assert {url for url in proxies["SG"].stats()["urls"] if "/js/product/" in url} == sg_pages  # no MY page via SG

    # 3. Idle: every slot closes its browser after the (shortened) idle time.
    wait_for(lambda: all(r.state == SlotState.NO_PAGE for r in registry.slots()) and not slot_browsers(), 40,
             lambda: f"{registry.slots()} {pids_of(slot_browsers())}", between=manager.close_idle)

    # 4. A killed Chromium: the next load re-launches it and the tasks still land.
    push(sg, range(40, 44))
    wait_for(lambda: redis_client.llen(KEYS.browser_tasks("SG")) > 0, 20, lambda: "SG tasks not queued")
    run_jobs()
    wait_for(lambda: any(r.browser_pid for r in registry.slots() if r.country == "SG"), 30,
             lambda: f"{registry.slots()}", between=run_jobs)
    victim = next(r for r in registry.slots() if r.country == "SG" and r.browser_pid)
    os.kill(victim.browser_pid, signal.SIGKILL)  # type: ignore[arg-type]
    wait_for(lambda: stored(sg) == 16, 90, lambda: f"{stored(sg)} SG records; {registry.slots()}", between=run_jobs)

    # 5. A killed slot process: reset within two heartbeats, its browser reaped, its task back by its lease.
    push(sg, range(50, 60))
    wait_for(lambda: any(r.state == SlotState.RUNNING_SCRAPING_TASK for r in registry.slots()), 60,
             lambda: f"{registry.slots()}", between=run_jobs)
    victim = next(r for r in registry.slots() if r.process_id and r.state != SlotState.NO_PAGE)
    assert victim.process_id in {p.pid for p in psutil.Process(worker.process.pid).children()}  # a pool process
    os.kill(victim.process_id, signal.SIGKILL)  # type: ignore[arg-type]
    killed_at = time.monotonic()
    wait_for(lambda: (registry.get(victim.id) is None or registry.get(victim.id).owner != victim.owner), 15,
             lambda: f"{registry.get(victim.id)}")
    assert time.monotonic() - killed_at < 10
    wait_for(lambda: not any(p.info["cmdline"] and f"{OWNER_FLAG}{victim.process_id}" in p.info["cmdline"]
                             for p in psutil.process_iter(["cmdline"])), 20, lambda: "the orphan browser lives on")
    wait_for(lambda: stored(sg) == 26, 120, lambda: f"{stored(sg)} SG records; {registry.slots()}; "
             f"{store.stats(['sg_shop'])}", between=run_jobs)
    assert len(set(database[sg.output_collection].distinct("sku"))) == 26  # every task landed once

    # 6. Stop: nothing left running.
    worker.stop()
    wait_for(lambda: not slot_browsers(), 20, lambda: f"browsers left: {pids_of(slot_browsers())}")
    assert not slot_processes()


def test_a_page_that_never_loads_relaunches_after_4_and_gives_up_after_7(
    slot_settings: HarvesterSettings, proxies: dict, demo_site, redis_client, celery_worker_factory,
    start_distributor,
) -> None:
    start_distributor()
    celery_worker_factory(queues="pageslots", concurrency=1, name="slots-dead")
    source = write_source(slot_settings, browser_source_document(demo_site.url, "sg_dead", "SG", retries=0,
                                                                 timeout=1))
    manager = PageSlotManager(redis_client, slot_settings)
    dead_url = f"{demo_site.url}/slow/1?delay=3"  # never loads within the source's 1 s timeout
    Intake(redis_client, slot_settings).push(source, [TaskMessage(task_id="dead", source=source.name,
                                                                  kind="details", url=dead_url)])
    wait_for(lambda: SlotHosts(redis_client).live_capacity().slots == 1, 30, lambda: "no capacity")
    wait_for(lambda: redis_client.llen(KEYS.browser_tasks("SG")) == 1, 20, lambda: "not queued")
    manager.allocate()
    manager.prepare()
    wait_for(lambda: redis_client.llen(SourceKeys(source.name).dead_letters) == 1, 60,
             lambda: f"{SlotRegistry(redis_client).slots()}")
    letter = json.loads(redis_client.lindex(SourceKeys(source.name).dead_letters, 0))
    assert letter["reason"].startswith("timeout: page did not load within 1s")
    assert "page slot gave up after 7 consecutive failed loads" in letter["reason"]
    counters = RateLimitStore(redis_client, slot_settings).counters(source.name)
    assert counters["outcome:browser_failed_loads"] == 7
    assert counters["outcome:browser_relaunches"] == 1  # after the 4th
    assert counters["outcome:browser_gave_up"] == 1
    [record] = SlotRegistry(redis_client).slots()
    assert record.state == SlotState.NO_PAGE and "gave up after 7" in record.reason


def test_chromium_missing_at_launch_gives_the_slot_up_and_leaves_nothing(
    configure_settings: Callable[..., HarvesterSettings], proxies: dict, redis_client, celery_worker_factory,
    tmp_path,
) -> None:
    settings = configure_settings(chromium_executable=str(tmp_path / "no-chromium"), page_slot_heartbeat_seconds=1,
                                  page_slot_retry_delay_seconds=0.05)
    celery_worker_factory(queues="pageslots", concurrency=1, name="slots-nochrome")
    wait_for(lambda: SlotHosts(redis_client).live_capacity().slots == 1, 30, lambda: "no capacity")
    registry = SlotRegistry(redis_client)
    [slot_id] = registry.create("SG", 1)
    registry.transition(slot_id, SlotState.PREPARING_PAGE)
    PageSlotManager(redis_client, settings)._start(slot_id)
    wait_for(lambda: registry.get(slot_id).state == SlotState.NO_PAGE, 60,  # type: ignore[union-attr]
             lambda: f"{registry.get(slot_id)}")
    record = registry.get(slot_id)
    assert record is not None and "gave up after 7" in record.reason and "no-chromium" in record.reason


def test_a_sigkilled_slot_host_and_a_redis_restart_lose_no_task_and_leave_no_browser(
    slot_settings: HarvesterSettings, proxies: dict, demo_site, mongo_server, redis_client, redis_server,
    celery_worker_factory, start_distributor,
) -> None:
    start_distributor()
    worker = celery_worker_factory(queues="pageslots", concurrency=2, name="slots-a")
    source = write_source(slot_settings, browser_source_document(demo_site.url, "sg_faults", "SG"))
    manager = PageSlotManager(redis_client, slot_settings)
    registry = SlotRegistry(redis_client)
    collection = mongo_server.client()[slot_settings.mongo_database][source.output_collection]

    def run_jobs() -> None:
        try:
            manager.allocate()
            manager.prepare()
        except Exception as error:  # Redis restarting: the DAG's next run tries again
            print(f"jobs failed for now: {error}")

    Intake(redis_client, slot_settings).push(source, [
        TaskMessage(task_id=f"t{n}", source=source.name, kind="details", url=f"{demo_site.url}/slow/{n}?delay=0.5",
                    country="SG") for n in range(1, 31)])
    wait_for(lambda: SlotHosts(redis_client).live_capacity().slots == 2, 30, lambda: "no capacity")
    wait_for(lambda: collection.count_documents({}) >= 3, 90, lambda: f"{registry.slots()}", between=run_jobs)

    # the whole slot host is SIGKILLed: its Chromium processes are orphans, its slots stop heartbeating
    orphans = pids_of(slot_browsers())
    assert orphans
    worker.kill()
    replacement = celery_worker_factory(queues="pageslots", concurrency=2, name="slots-b")
    wait_for(lambda: not (orphans & pids_of(slot_browsers())), 30, lambda: "orphan browsers live on")
    wait_for(lambda: collection.count_documents({}) >= 12, 120, lambda: f"{registry.slots()}", between=run_jobs)

    # Redis restarts while slots run (AOF on): slots and tasks come back
    redis_server.server.restart(timeout=30)
    wait_for(lambda: collection.count_documents({}) == 30, 180,
             lambda: f"{collection.count_documents({})} stored; {registry.slots()}", between=run_jobs)
    assert len(collection.distinct("sku")) == 30
    replacement.stop()
    wait_for(lambda: not slot_browsers(), 20, lambda: f"browsers left: {pids_of(slot_browsers())}")
