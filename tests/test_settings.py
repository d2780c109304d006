"""Every setting is read, and one small test per knob shows it changes what the component does (Scrapy style)."""

from __future__ import annotations

import ast
from fractions import Fraction
from pathlib import Path

import pymongo
import pytest
import redis
from harvester.config.loader import load_source_file, load_sources
from harvester.config.model import SourceConfig
from harvester.distributor import Intake, RateLimitStore, RetryPolicy, TaskMessage
from harvester.distributor.service import Distributor
from harvester.pageslots.allocation import AllocationPolicy
from harvester.redis_keys import SourceKeys
from harvester.scraping.fetcher import request_headers
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings, get_settings
from harvester.storage.data_handler import DataHandler

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
SOURCE = SourceConfig.model_validate({"name": "shop", "attributes": {"t": "h1"},
                                      "input": {"kind": "details", "seeds": ["http://a.example/1"]}})
MINIMAL_YAML = "name: {name}\ninput: {{kind: details, seeds: ['{seed}']}}\nattributes: {{t: h1}}\n"


def attributes_read_by_the_package() -> set[str]:
    """``x.name`` and ``getattr(x, "name", ...)`` anywhere, and ``info.data.get("name")`` in settings'
    own validators (a setting whose default is built from another one)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and path.name != "settings.py":
                names.add(node.attr)
            elif (isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.func, ast.Name)
                  and node.func.id == "getattr" and isinstance(node.args[1], ast.Constant)):
                names.add(str(node.args[1].value))
            elif (path.name == "settings.py" and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "get" and ast.unparse(node.func.value) == "info.data"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(str(node.args[0].value))
    return names


@pytest.mark.unit
def test_every_setting_is_read_somewhere_in_the_package():
    """A setting nobody reads is a knob that does nothing: remove it, or wire it and test it here."""
    read = attributes_read_by_the_package()
    in_source_files = " ".join(path.read_text() for path in (REPOSITORY_ROOT / "include" / "sources").glob("*.yaml"))
    unread = [name for name in HarvesterSettings.model_fields
              if name not in read and f"HARVESTER_{name.upper()}" not in in_source_files]
    assert unread == []


# -- distributor -----------------------------------------------------------------------------------
@pytest.mark.unit
def test_retry_base_and_max_seconds_shape_the_backoff():
    policy = RetryPolicy.from_settings(HarvesterSettings(retry_base_seconds=3, retry_max_seconds=10))
    policy = RetryPolicy(policy.base_seconds, policy.max_seconds, jitter=0)
    assert [policy.delay(attempt) for attempt in range(4)] == [3, 6, 10, 10]


@pytest.mark.unit
def test_publish_batch_size_is_the_tasks_per_celery_message():
    client = redis.Redis(port=1)  # never contacted: building a distributor opens no connection
    assert Distributor(client, HarvesterSettings(publish_batch_size=7)).publisher.batch_size == 7


@pytest.mark.integration
@pytest.mark.parametrize("lease_seconds", [30.0, 90.0])
def test_lease_seconds_is_the_lease_an_admitted_task_gets(redis_client, lease_seconds):
    settings = HarvesterSettings(lease_seconds=lease_seconds)
    Intake(redis_client, settings).push(SOURCE, [TaskMessage(source="shop", url="http://a.example/1")])
    admission = RateLimitStore(redis_client, settings).admit("shop", 1, now=1000.0)
    (task_id,) = [TaskMessage.model_validate_json(raw).task_id for raw in admission.messages]
    assert redis_client.zscore(SourceKeys("shop").active, task_id) == 1000.0 + lease_seconds


@pytest.mark.integration
def test_rate_window_seconds_is_how_long_an_admission_counts_against_per_minute(redis_client):
    source = SOURCE.model_copy(update={"rate_limit": SOURCE.rate_limit.model_copy(update={"per_minute": 1})})
    for window, admitted_later in ((10.0, 1), (100.0, 0)):
        redis_client.flushdb()
        settings = HarvesterSettings(rate_window_seconds=window)
        Intake(redis_client, settings).push(source, [TaskMessage(source="shop", url=f"http://a.example/{n}")
                                                     for n in range(2)])
        store = RateLimitStore(redis_client, settings)
        assert len(store.admit("shop", 1, now=1000.0).messages) == 1
        assert len(store.admit("shop", 1, now=1050.0).messages) == admitted_later, window


@pytest.mark.integration
def test_reap_batch_size_caps_the_leases_reaped_per_source_per_call(redis_client):
    settings = HarvesterSettings(reap_batch_size=2, lease_seconds=10)
    source = SOURCE.model_copy(update={"rate_limit": SOURCE.rate_limit.model_copy(update={"max_active": 10})})
    Intake(redis_client, settings).push(source, [TaskMessage(source="shop", url=f"http://a.example/{n}")
                                                 for n in range(5)])
    store = RateLimitStore(redis_client, settings)
    assert len(store.admit("shop", 5, now=1000.0).messages) == 5
    assert store.reap(["shop"], now=2000.0).reaped == 2


@pytest.mark.integration
def test_admit_batch_size_caps_the_tasks_one_source_gets_per_round(redis_client, redis_server):
    settings = HarvesterSettings(redis_url=redis_server.url, admit_batch_size=3)
    source = SOURCE.model_copy(update={"rate_limit": SOURCE.rate_limit.model_copy(update={"max_active": 100,
                                                                                       "per_minute": 1000})})
    Intake(redis_client, settings).push(source, [TaskMessage(source="shop", url=f"http://a.example/{n}")
                                                 for n in range(10)])
    assert Distributor(redis_client, settings).run_round().admitted == 3


@pytest.mark.integration
def test_queue_max_depth_stops_admission_to_a_full_queue(redis_client, redis_server):
    source = SOURCE.model_copy(update={"rate_limit": SOURCE.rate_limit.model_copy(update={"max_active": 100,
                                                                                       "per_minute": 1000})})
    Intake(redis_client, HarvesterSettings()).push(source, [TaskMessage(source="shop", url=f"http://a.example/{n}")
                                                            for n in range(4)])
    redis_client.rpush(source.queue, *[f"waiting {n}" for n in range(3)])  # three Celery messages queued
    for depth, admitted in ((3, 0), (4, 4)):
        settings = HarvesterSettings(redis_url=redis_server.url, queue_max_depth=depth)
        outcome = Distributor(redis_client, settings).run_round()
        assert (outcome.admitted, outcome.backpressured) == (admitted, admitted == 0), depth


@pytest.mark.unit
def test_redis_url_is_the_broker_the_distributor_publishes_to():
    from harvester.distributor.service import celery_app_for

    assert celery_app_for(HarvesterSettings(redis_url="redis://127.0.0.1:1/5")).conf.broker_url == \
        "redis://127.0.0.1:1/5"


# -- storage, scraping, config ---------------------------------------------------------------------
@pytest.mark.unit
def test_output_sink_discard_writes_nothing():
    client = pymongo.MongoClient(port=1, connect=False, serverSelectionTimeoutMS=100)  # never reached
    result = DataHandler(HarvesterSettings(output_sink="discard"), client).write(SOURCE, [{"url": "u", "t": "x"}])
    assert (result.discarded, result.upserted) == (1, 0)
    client.close()


@pytest.mark.unit
def test_mongo_database_is_where_records_go_unless_the_source_names_one():
    client = pymongo.MongoClient(port=1, connect=False)
    assert DataHandler(HarvesterSettings(mongo_database="elsewhere"), client).database(SOURCE).name == "elsewhere"
    client.close()


@pytest.mark.unit
def test_user_agent_is_sent_unless_the_source_sets_its_own():
    assert request_headers(SOURCE, HarvesterSettings(user_agent="probe/1"))["User-Agent"] == "probe/1"


@pytest.mark.unit
def test_sources_dir_is_where_sources_are_loaded_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "probe.yaml").write_text(MINIMAL_YAML.format(name="probe", seed="http://a.example/"))
    monkeypatch.setenv("HARVESTER_SOURCES_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert list(load_sources().sources) == ["probe"]
    finally:
        get_settings.cache_clear()


@pytest.mark.unit
def test_demo_site_url_fills_the_placeholder_in_source_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "probe.yaml"
    path.write_text(MINIMAL_YAML.format(name="probe", seed="${HARVESTER_DEMO_SITE_URL}/list"))
    monkeypatch.delenv("HARVESTER_DEMO_SITE_URL", raising=False)
    monkeypatch.setattr("harvester.settings.get_settings", lambda: HarvesterSettings(demo_site_url="http://d.test"))
    assert load_source_file(path).input.seeds == ["http://d.test/list"]


# -- page slots ------------------------------------------------------------------------------------
RECENT = [("SG", False, 5.0)] * 8 + [("MY", True, 0.0)] * 3 + [("VN", False, 70.0)]  # VN's share rounds to 0


@pytest.mark.unit
def test_max_page_slots_is_the_total_the_allocation_shares():
    for total in (2, 6):
        policy = AllocationPolicy.from_settings(HarvesterSettings(max_page_slots=total))
        assert sum(policy.allocate(RECENT).values()) == total


@pytest.mark.unit
def test_page_slot_starving_seconds_gives_a_long_waiting_country_a_slot():
    waits = {seconds: AllocationPolicy.from_settings(HarvesterSettings(max_page_slots=4,
                                                                       page_slot_starving_seconds=seconds))
             for seconds in (60.0, 100.0)}
    assert waits[60.0].allocate(RECENT)["VN"] == 1  # waited 70 s > 60 s
    assert waits[100.0].allocate(RECENT)["VN"] == 0


@pytest.mark.unit
def test_allocation_sample_size_is_how_many_recent_tasks_are_scored():
    policy = AllocationPolicy.from_settings(HarvesterSettings(max_page_slots=4, allocation_sample_size=3))
    assert policy.allocate(RECENT) == {"SG": 4}  # only the three most recent tasks (all SG) count


@pytest.mark.unit
def test_min_scraping_tasks_by_pageslot_sets_how_many_slots_start():
    for fraction, started in (("1/3", 3), ("1", 1)):
        policy = AllocationPolicy.from_settings(HarvesterSettings(min_scraping_tasks_by_pageslot=fraction))
        assert policy.min_scraping_tasks_by_page_slot == Fraction(fraction)
        assert policy.to_start({"SG": 5}, {"SG": 1}) == {"SG": started}
