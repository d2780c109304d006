"""The allocator's jobs against a real Redis: the seed's worked example, starvation, moves, deletions,
preparation's exact fraction, idle closing, the capacity cap and countries without a proxy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import redis
from harvester.distributor import RateLimitStore, TaskMessage
from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.pageslots.handoff import PageSlotHandoff
from harvester.pageslots.manager import PageSlotManager
from harvester.pageslots.registry import SlotHosts, SlotRegistry, SlotState, slot_counts
from harvester.redis_keys import PageSlotKeys, SourceKeys
from harvester.settings import HarvesterSettings

pytestmark = pytest.mark.integration
KEYS = PageSlotKeys()
ACTIVE = {"SG": 2, "MY": 2, "PH": 1, "TH": 1, "ID": 0, "VN": 0}
COMPLETED = {"SG": 29, "MY": 24, "PH": 12, "TH": 7, "ID": 10, "VN": 0}
COUNTRIES = list(ACTIVE)


@pytest.fixture
def proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for country in COUNTRIES:
        monkeypatch.setenv(f"AIRFLOW_CONN_PROXY_{country}", f"http://127.0.0.1:9/{country}")


def manager_for(client: redis.Redis, started: list[str] | None = None, capacity: int = 20,
                **settings: object) -> PageSlotManager:
    SlotHosts(client).advertise("host-a", capacity, 60)
    starter: Callable[[str], None] = (started.append if started is not None else lambda slot_id: None)
    return PageSlotManager(client, HarvesterSettings(**settings), start_slot=starter)


def record_tasks(client: redis.Redis, active: dict[str, int], completed: dict[str, int]) -> None:
    book = BrowserTaskBook(client)
    for country in COUNTRIES:
        done = [task_member("demo", f"{country}-done-{i}") for i in range(completed.get(country, 0))]
        book.pending([(member, country) for member in done])
        book.completed(done)
        book.pending([(task_member("demo", f"{country}-open-{i}"), country) for i in range(active.get(country, 0))])


def test_seed_worked_example_through_redis(redis_client: redis.Redis, proxies: None) -> None:
    record_tasks(redis_client, ACTIVE, COMPLETED)
    started: list[str] = []
    manager = manager_for(redis_client, started)
    allocation = manager.allocate()
    assert slot_counts(manager.registry.slots()) == {"SG": 7, "MY": 6, "PH": 3, "TH": 2, "ID": 2}
    assert allocation.figures["scores"] == {"SG": 350, "MY": 300, "PH": 150, "TH": 100, "ID": 100}  # VN had no task
    assert "SG 0 → 7 slots: +7 created" in allocation.story
    preparation = manager.prepare()
    assert preparation.figures["started_target"] == {"SG": 6, "MY": 6, "PH": 3, "TH": 2, "ID": 0}
    by_country: dict[str, int] = {}
    for record in manager.registry.slots():
        if record.state == SlotState.PREPARING_PAGE:
            by_country[record.country] = by_country.get(record.country, 0) + 1
    assert by_country == {"SG": 6, "MY": 6, "PH": 3, "TH": 2}
    assert len(started) == 17 and "SG 7 → 7 slots: 6 started" in preparation.story
    assert manager.prepare().story == "nothing to change"  # already started
    decision = manager.last_decision()
    assert decision is not None and decision["figures"]["desired"]["SG"] == 7


def test_demand_shifting_moves_idle_slots_and_lets_busy_ones_finish(redis_client: redis.Redis,
                                                                     proxies: None) -> None:
    record_tasks(redis_client, {"SG": 10}, {})
    manager = manager_for(redis_client, capacity=4)
    manager.allocate()
    assert slot_counts(manager.registry.slots()) == {"SG": 4}
    registry = manager.registry
    busy, *idle = sorted(r.id for r in registry.slots())
    registry.transition(busy, SlotState.PREPARING_PAGE)
    registry.claim(busy, "h:1:x", "h", 1, 10)
    registry.transition(busy, SlotState.PAGE_READY, "h:1:x")
    registry.transition(busy, SlotState.RUNNING_SCRAPING_TASK, "h:1:x")
    # every SG task completes, MY gets the demand: SG 10 x 10 = 100, MY 10 x 30 = 300 -> SG 1, MY 3
    book = BrowserTaskBook(redis_client)
    book.completed([task_member("demo", f"SG-open-{i}") for i in range(10)])
    book.pending([(task_member("demo", f"MY-open-{i}"), "MY") for i in range(10)])
    report = manager.allocate()
    assert report.figures["desired"] == {"SG": 1, "MY": 3}
    assert slot_counts(registry.slots()) == {"SG": 1, "MY": 3}
    assert "MY 0 → 3 slots: +3 moved from SG" in report.story and "SG 4 → 1 slots: 3 moving to MY" in report.story
    record = registry.get(busy)
    assert record is not None and record.country == "SG" and record.state == SlotState.RUNNING_SCRAPING_TASK
    assert not record.leaving  # the busy slot was not chosen while idle ones could go
    assert {r.country for r in registry.slots() if r.id in idle} == {"MY"}


def test_fewer_slots_deletes_idle_ones_now_and_busy_ones_after_their_tasks(redis_client: redis.Redis,
                                                                          proxies: None) -> None:
    record_tasks(redis_client, {"SG": 5, "MY": 5}, {})
    manager = manager_for(redis_client, capacity=6)
    manager.allocate()
    registry = manager.registry
    assert slot_counts(registry.slots()) == {"SG": 3, "MY": 3}
    for record in registry.slots():
        if record.country == "MY":
            registry.transition(record.id, SlotState.PREPARING_PAGE)
            registry.claim(record.id, f"h:{record.id}", "h", 1, 10)
            registry.transition(record.id, SlotState.PAGE_READY, f"h:{record.id}")
            registry.transition(record.id, SlotState.RUNNING_SCRAPING_TASK, f"h:{record.id}")
    SlotHosts(redis_client).advertise("host-a", 2, 60)  # a host went away: capacity 2
    report = manager.allocate()
    assert report.figures["effective_max"] == 2
    assert slot_counts(registry.slots()) == {"SG": 1, "MY": 1}
    assert "SG 3 → 1 slots: 2 deleted" in report.story
    assert "MY 3 → 1 slots: 2 deleted after their tasks" in report.story
    assert len(registry.slots()) == 4  # two busy MY slots still finish their tasks


def test_starving_country_gets_a_slot_after_fifty_seconds(redis_client: redis.Redis, proxies: None) -> None:
    record_tasks(redis_client, {"VN": 1}, {"SG": 3000})
    manager = manager_for(redis_client, capacity=5, allocation_sample_size=3001)
    assert manager.allocate().figures["desired"]["VN"] == 0
    aged = manager_for(redis_client, capacity=5, allocation_sample_size=3001, page_slot_starving_seconds=0.2)
    time.sleep(0.4)
    report = aged.allocate()
    assert report.figures["desired"]["VN"] == 1 and sum(report.figures["desired"].values()) == 5


def test_no_live_host_means_no_slots(redis_client: redis.Redis, proxies: None) -> None:
    record_tasks(redis_client, {"SG": 3}, {})
    manager = PageSlotManager(redis_client, HarvesterSettings(), start_slot=lambda slot_id: None)
    report = manager.allocate()
    assert report.figures["effective_max"] == 0 and manager.registry.slots() == []


def test_preparation_with_min_tasks_above_one(redis_client: redis.Redis, proxies: None) -> None:
    record_tasks(redis_client, {"SG": 9}, {})
    started: list[str] = []
    manager = manager_for(redis_client, started, capacity=10, min_scraping_tasks_by_pageslot="4")
    manager.allocate()
    manager.prepare()
    assert len(started) == 3  # ceil(9 / 4)


def test_idle_slots_are_closed(redis_client: redis.Redis, proxies: None) -> None:
    manager = manager_for(redis_client, page_slot_idle_seconds=0.3)
    registry = SlotRegistry(redis_client)
    [slot_id, busy] = registry.create("SG", 2)
    for one in (slot_id, busy):
        registry.transition(one, SlotState.PREPARING_PAGE)
        registry.claim(one, "h:1:x", "h", 1, 10)
        registry.transition(one, SlotState.PAGE_READY, "h:1:x")
    registry.transition(busy, SlotState.RUNNING_SCRAPING_TASK, "h:1:x")
    assert manager.close_idle().story == "nothing to change"
    time.sleep(0.4)
    report = manager.close_idle()
    assert "SG 1 → 1 slots: 1 idle closed" in report.story
    assert registry.get(slot_id).state == SlotState.CLOSING_PAGE  # type: ignore[union-attr]
    assert registry.get(busy).state == SlotState.RUNNING_SCRAPING_TASK  # type: ignore[union-attr]


def test_country_without_proxy_gets_no_page_and_its_tasks_are_dead_lettered(
    redis_client: redis.Redis, harvester_settings: HarvesterSettings, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_PROXY_TH", raising=False)
    store = RateLimitStore(redis_client, harvester_settings)
    redis_client.hset(SourceKeys("th_shop").config, mapping={"max_active": 10, "per_minute": 100, "retries": 3,
                                                             "queue": "pageslots", "render": "browser",
                                                             "country": "TH", "priority": "normal"})
    messages = [TaskMessage(source="th_shop", url=f"http://127.0.0.1:1/{i}", country="TH") for i in range(3)]
    for message in messages:
        redis_client.rpush(SourceKeys("th_shop").intake, message.to_json())
    admitted = store.admit("th_shop", 10)
    PageSlotHandoff(redis_client).push("TH", admitted.deliveries())
    manager = manager_for(redis_client)
    report = manager.allocate()
    assert report.errors and "no proxy configured for country TH" in report.errors[0]
    assert "AIRFLOW_CONN_PROXY_TH" in report.errors[0] and "3 queued tasks dead-lettered" in report.errors[0]
    assert manager.registry.slots() == []
    dead = [json.loads(entry) for entry in redis_client.lrange(SourceKeys("th_shop").dead_letters, 0, -1)]
    assert len(dead) == 3 and all("no proxy configured for country TH" in entry["reason"] for entry in dead)
    assert store.active_task_ids("th_shop") == []
    assert BrowserTaskBook(redis_client).census()["TH"].active == 0


def test_make_run_starts_a_slot_host_and_a_forward_proxy_per_demo_country() -> None:
    from harvester.services.stack import LocalStack
    from harvester.settings import REPOSITORY_ROOT

    stack = LocalStack(root=REPOSITORY_ROOT, environ={"PATH": "/usr/bin", "HARVESTER_RUN_PAGE_SLOTS": "3"})
    services = {service.name: service for service in stack.services()}
    worker = services["worker-pageslots"].command
    assert worker[worker.index("-Q") + 1] == "pageslots" and worker[worker.index("--concurrency") + 1] == "3"
    proxy = services["proxy-SG"]  # include/sources/demo_shop_browser.yaml is an SG source
    assert proxy.command[proxy.command.index("--port") + 1] == "3128"
    assert stack.environment()["AIRFLOW_CONN_PROXY_SG"] == "http://127.0.0.1:3128"
    configured = LocalStack(root=REPOSITORY_ROOT, environ={"PATH": "/usr/bin",
                                                           "AIRFLOW_CONN_PROXY_SG": "http://proxy.example:3128"})
    assert "proxy-SG" not in {s.name for s in configured.services()}  # a real proxy wins
    assert configured.environment()["AIRFLOW_CONN_PROXY_SG"] == "http://proxy.example:3128"


@pytest.mark.unit
def test_proxy_connections_parse_as_airflow_writes_them() -> None:
    from harvester.pageslots.proxies import ProxyNotConfigured, parse_proxy, proxy_for, require_proxy

    proxy = parse_proxy("SG", "http://user%40x:p%3Ass@proxy.example:3128")
    assert proxy.playwright() == {"server": "http://proxy.example:3128", "username": "user@x", "password": "p:ss"}
    assert "p:ss" not in repr(proxy)
    assert parse_proxy("MY", '{"conn_type": "http", "host": "10.0.0.1", "port": 8080}').server == \
        "http://10.0.0.1:8080"
    assert proxy_for("SG", {"AIRFLOW_CONN_PROXY_SG": "http://127.0.0.1:9"}).server == "http://127.0.0.1:9"
    assert proxy_for("SG", {}) is None
    with pytest.raises(ProxyNotConfigured, match="AIRFLOW_CONN_PROXY_TH"):
        require_proxy("TH", allow_direct=False, environ={})
    assert require_proxy("TH", allow_direct=True, environ={}) is None
