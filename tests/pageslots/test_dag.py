"""`airflow dags test page_slots` against a real Redis: the sensor skips a run with nothing to do, and a run
with browser work allocates, prepares (asking a slot host through the pageslots Celery queue) and closes."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.pageslots.registry import SlotHosts, SlotRegistry, SlotState, slot_counts
from harvester.settings import HarvesterSettings

from tests.producer.test_dag_end_to_end import _dags_test, airflow_home  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]


def sent_host_tasks(client: redis.Redis) -> list[str]:
    slot_ids = []
    for raw in client.lrange("pageslots", 0, -1):
        envelope = json.loads(raw)
        assert envelope["headers"]["task"] == "harvester.host_page_slot"
        args, _, _ = json.loads(base64.b64decode(envelope["body"]))
        slot_ids.append(args[0])
    return sorted(slot_ids)


def test_dags_test_page_slots_skips_without_work_and_runs_the_jobs_with_it(
    airflow_home: Path, configure_settings: Callable[..., HarvesterSettings],  # noqa: F811
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_settings(page_slots_sensor_wait_seconds=3)
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", "http://127.0.0.1:9")
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_MY", "http://127.0.0.1:9")

    idle_log = tmp_path / "idle.log"
    assert _dags_test(airflow_home, "page_slots", idle_log).returncode == 0
    text = idle_log.read_text(errors="replace")
    assert "Pausing task as DEFERRED" in text and "task_id=wait_for_browser_work" in text, text[-4000:]
    assert "new_state=skipped" in text and "allocate_page_slots: " not in text  # skipped, jobs not run
    assert SlotRegistry(redis_client).slots() == []

    SlotHosts(redis_client).advertise("test-host", 6, 300)
    book = BrowserTaskBook(redis_client)
    book.pending([(task_member("shop", f"sg-{i}"), "SG") for i in range(2)])
    book.pending([(task_member("shop", f"my-{i}"), "MY") for i in range(4)])
    work_log = tmp_path / "work.log"
    assert _dags_test(airflow_home, "page_slots", work_log).returncode == 0
    text = work_log.read_text(errors="replace")
    registry = SlotRegistry(redis_client)
    assert slot_counts(registry.slots()) == {"SG": 2, "MY": 4}, text[-4000:]
    assert "SG 0 → 2 slots: +2 created" in text and "MY 0 → 4 slots: +4 created" in text
    assert "SG 2 → 2 slots: 2 started" in text
    started = sorted(r.id for r in registry.slots() if r.state == SlotState.PREPARING_PAGE)
    assert len(started) == 6 and sent_host_tasks(redis_client) == started
    assert "close_idle_page_slots: nothing to change" in text


def test_the_dag_runs_every_minute_one_run_at_a_time_with_a_deferred_sensor_first() -> None:
    from harvester.airflow.page_slots import BrowserWorkSensor, build_page_slots_dag

    dag = build_page_slots_dag()
    assert dag.dag_id == "page_slots" and dag.max_active_runs == 1 and dag.catchup is False
    assert dag.schedule == "* * * * *"
    order = [task.task_id for task in dag.topological_sort()]
    assert order == ["wait_for_browser_work", "allocate_page_slots", "prepare_page_slots", "close_idle_page_slots"]
    sensor = dag.get_task("wait_for_browser_work")
    assert isinstance(sensor, BrowserWorkSensor) and sensor.deferrable and sensor.soft_fail
    assert sensor.timeout < 60  # it gives the minute back before the next run


@pytest.mark.integration
def test_the_sensor_trigger_carries_the_connection_id_and_first_looks_after_one_interval(
    redis_client: redis.Redis, configure_settings: Callable[..., HarvesterSettings],
) -> None:
    """No Redis URL (it may hold a password) in the trigger table; and a trigger that fired at once let the
    task resume before the scheduler saw its deferral, which Airflow then failed (seen under make run)."""
    import asyncio
    import time

    from harvester.airflow.page_slots import BrowserWorkTrigger
    from harvester.redis_keys import PageSlotKeys

    configure_settings()
    redis_client.rpush(PageSlotKeys().browser_tasks("SG"), "a browser task waiting for a slot")
    trigger = BrowserWorkTrigger("redis_default", 1.0, time.time() + 30)
    classpath, kwargs = trigger.serialize()
    assert classpath == "harvester.airflow.page_slots.BrowserWorkTrigger"
    assert kwargs["redis_connection_id"] == "redis_default" and "://" not in json.dumps(kwargs)

    async def first_event() -> tuple[float, dict]:
        started = time.monotonic()
        async for event in BrowserWorkTrigger(**kwargs).run():
            return time.monotonic() - started, event.payload
        raise AssertionError("the trigger ended without an event")

    waited, payload = asyncio.run(first_event())
    assert payload == {"status": "work"} and waited >= 1.0
