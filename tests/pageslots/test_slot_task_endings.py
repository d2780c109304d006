"""How a slot ends a task it cannot run: the way every task ends (harvester.distributor.DeadLettering), with
the counters the HTTP path keeps. Real Redis and MongoDB, a real slot record; no browser is needed (the
task ends before its page is rendered)."""

from __future__ import annotations

import asyncio

import pytest
import redis
from harvester.config.model import SourceConfig
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.distributor.registry import DOCUMENT_FIELD
from harvester.pageslots.bookkeeping import task_member
from harvester.pageslots.host import PageSlotHost
from harvester.pageslots.registry import SlotRegistry, SlotState
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings
from harvester.storage import PackageStatus, PackageStore, planned_task_id
from harvester.workers.batch import BatchRunner
from harvester.workers.slot_pipeline import WorkerSlotPipeline

from tests.fixtures.servers import MongoServer

pytestmark = pytest.mark.integration
URL = "http://shop.test/product/1"


def test_a_task_whose_registration_cannot_be_read_is_handed_back_and_counted_down(
        harvester_settings: HarvesterSettings, redis_client: redis.Redis, mongo_server: MongoServer) -> None:
    """The slot handed such a task to the store itself (``store.fail``): past its retries it was dead-lettered
    but never counted down in its package (left to the run's settle step) nor counted ``config_error``."""
    settings = harvester_settings
    source = SourceConfig(name="shop", render="browser", country="SG", retries=0,
                          input={"seeds": ["http://shop.test/"], "kind": "details"},
                          attributes={"title": {"css": "h1::text"}})
    packages = PackageStore(mongo_server.client()[settings.mongo_database])
    packages.create_packages("shop", "run1", [(0, [URL])])
    task_id = planned_task_id("shop", "run1", 0, URL)
    Intake(redis_client, settings).push(source, [TaskMessage(task_id=task_id, source="shop", url=URL, run_id="run1",
                                                             package_id=0, country="SG")])
    [raw] = RateLimitStore(redis_client, settings).admit("shop", 1).deliveries()
    message = TaskMessage.model_validate(raw)
    redis_client.hdel(SourceKeys("shop").config, DOCUMENT_FIELD)  # admitted, then its registration unreadable

    registry = SlotRegistry(redis_client)
    (slot_id,) = registry.create("SG", 1)
    registry.transition(slot_id, SlotState.PREPARING_PAGE)
    host = PageSlotHost(slot_id, settings, worker="pageslots@test",
                        pipeline=WorkerSlotPipeline(BatchRunner(settings)))
    assert registry.claim(slot_id, host.owner, host.worker, 1, 10) == "ok"
    registry.transition(slot_id, SlotState.PAGE_READY, host.owner)
    host.country = "SG"
    member = task_member("shop", task_id)
    assert registry.begin_task(slot_id, host.owner, "SG", message.to_json(), member) == "ok"
    host.state = SlotState.RUNNING_SCRAPING_TASK

    asyncio.run(host._run_task(message, member))

    assert host.state == SlotState.PAGE_READY  # the page is kept for the next task
    letter = DeadLetters(redis_client).find("shop", task_id)
    assert letter is not None and "could not be loaded" in letter.reason
    counters = RateLimitStore(redis_client, settings).counters("shop")
    assert counters.get("outcome:config_error") == 1 and counters.get("dead") == 1
    statuses, tasks = packages.summary("shop", "run1")
    assert statuses[PackageStatus.FINISHED] == 1 and tasks["failed"] == 1, (statuses, tasks)  # counted down at once


def test_a_country_without_a_proxy_dead_letters_its_backlog_at_once_and_counts_it_down(
        harvester_settings: HarvesterSettings, redis_client: redis.Redis, mongo_server: MongoServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator refuses a country no proxy serves: every task waiting for its slots is dead-lettered with
    the reason and counted down in its package, in one round trip (one each before) and one count-down."""
    from harvester.distributor.service import Distributor
    from harvester.pageslots.handoff import PageSlotHandoff
    from harvester.pageslots.manager import PageSlotManager

    monkeypatch.delenv("AIRFLOW_CONN_PROXY_ZZ", raising=False)
    settings = harvester_settings.model_copy(update={"page_slot_allow_direct_connections": False})
    source = SourceConfig(name="zz_shop", render="browser", country="ZZ", retries=3,
                          input={"seeds": ["http://zz.test/"], "kind": "details"},
                          attributes={"title": {"css": "h1::text"}}, rate_limit={"max_active": 50, "per_minute": 1000})
    urls = [f"http://zz.test/product/{n}" for n in range(12)]
    packages = PackageStore(mongo_server.client()[settings.mongo_database])
    packages.create_packages("zz_shop", "run1", [(0, urls)])
    Intake(redis_client, settings).push(source, [
        TaskMessage(task_id=planned_task_id("zz_shop", "run1", 0, url), source="zz_shop", url=url, run_id="run1",
                    package_id=0, country="ZZ") for url in urls])
    Distributor(redis_client, settings, browser_handoff=PageSlotHandoff(redis_client)).run_round()
    assert redis_client.llen(PageSlotHandoff.backlog_key("ZZ")) == 12
    redis_client.config_resetstat()

    report = PageSlotManager(redis_client, settings).allocate()

    assert any("12 queued tasks dead-lettered" in error for error in report.errors), report.errors
    assert int(redis_client.info("commandstats")["cmdstat_ltrim"]["calls"]) == 1  # one round trip's wake-up
    letters = DeadLetters(redis_client).list("zz_shop", 0, 100)
    assert len(letters) == 12 and all("AIRFLOW_CONN_PROXY_ZZ" in letter.reason for letter in letters)
    statuses, tasks = packages.summary("zz_shop", "run1")
    assert statuses[PackageStatus.FINISHED] == 1 and tasks["failed"] == 12
    assert RateLimitStore(redis_client, settings).stats(["zz_shop"])["zz_shop"].active == 0


def test_a_slot_stops_vouching_for_a_task_past_its_deadline(harvester_settings: HarvesterSettings,
                                                            redis_client: redis.Redis) -> None:
    """A batch stuck past every timeout stops being heartbeaten, so the reaper hands its tasks on (LeaseHeartbeat's
    deadline); a slot's heartbeat extended its task's lease for as long as the process lived."""
    import time

    from harvester.pageslots.heartbeat import SlotHeartbeat

    settings = harvester_settings.model_copy(update={"lease_seconds": 30.0})
    source = SourceConfig(name="shop", render="browser", country="SG", input={"seeds": ["http://shop.test/"],
                                                                              "kind": "details"},
                          attributes={"title": {"css": "h1::text"}})
    Intake(redis_client, settings).push(source, [TaskMessage(task_id="t1", source="shop", url=URL, country="SG")])
    store = RateLimitStore(redis_client, settings)
    [raw] = store.admit("shop", 1).deliveries()
    now = time.time()
    store.start("shop", {"t1": str(raw["lease_token"])}, now=now - 20)  # its lease ends in 10 s
    heartbeat = SlotHeartbeat(redis_client, settings, "SG-1", "owner", lambda: None)

    heartbeat.hold(("shop", "t1", str(raw["lease_token"])), seconds=60)
    heartbeat.beat()
    assert redis_client.zscore(SourceKeys("shop").active, "t1") > now + 25  # vouched for: a lease from now

    heartbeat.hold(("shop", "t1", str(raw["lease_token"])), seconds=-1)  # past its deadline
    redis_client.zadd(SourceKeys("shop").active, {"t1": now + 5})
    heartbeat.beat()
    assert redis_client.zscore(SourceKeys("shop").active, "t1") == pytest.approx(now + 5)  # left to expire
