"""Airflow adapter of the page slots: the ``page_slots`` DAG (DESIGN.md section 5), every minute.

``wait_for_browser_work`` passes when there is browser work, a slot record or a queued browser task,
and skips the run otherwise; while it waits it is deferred to the triggerer, so it holds no worker slot
for the minute. Then ``allocate_page_slots`` -> ``prepare_page_slots`` -> ``close_idle_page_slots`` run
the seed's jobs (:class:`harvester.pageslots.manager.PageSlotManager`); each logs its story and returns
what it changed (XCom).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, BaseSensorOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

from harvester.errors import StorageError
from harvester.settings import get_settings

DAG_ID = "page_slots"
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
SENSOR_POLL_SECONDS = 10.0
REDIS_CONNECTION_ID = "redis_default"
STEPS = ("allocate_page_slots", "prepare_page_slots", "close_idle_page_slots")


def _manager() -> Any:
    from harvester.connections import redis_client
    from harvester.pageslots import PageSlotManager

    settings = get_settings()
    return PageSlotManager(redis_client(settings=settings), settings)


def has_browser_work(target: Any) -> bool:
    """True when there is browser work or a slot to reconcile (``target``: a resolved RedisTarget). The
    client is the factory's cached one for the target, so a poll every few seconds opens no connection."""
    from harvester.connections import redis_client_for
    from harvester.pageslots import PageSlotManager

    return PageSlotManager(redis_client_for(target), get_settings()).has_work()


class BrowserWorkTrigger(BaseTrigger):
    """Fires "work" as soon as there is browser work or a slot to reconcile, or "idle" at the deadline.

    It carries the Redis connection id, never its URL (which may hold a password): the triggerer
    resolves the id itself, as the harvest trigger does.
    """

    def __init__(self, redis_connection_id: str, poll_seconds: float, deadline: float) -> None:
        super().__init__()
        self.redis_connection_id, self.poll_seconds, self.deadline = redis_connection_id, poll_seconds, deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"redis_connection_id": self.redis_connection_id, "poll_seconds": self.poll_seconds,
                 "deadline": self.deadline})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from harvester.connections import aresolve_redis

        # The sensor has just looked and found nothing: the first look here waits one interval. Firing
        # at once lets the task resume before the scheduler has handled the executor's event of the
        # deferral, and Airflow then fails the resumed task ("finished with state success, but the task
        # instance's state attribute is running"), seen under `make run` with the LocalExecutor.
        await asyncio.sleep(min(self.poll_seconds, max(0.0, self.deadline - time.time())))
        while True:
            try:
                target = await aresolve_redis(self.redis_connection_id, get_settings())
                if await asyncio.to_thread(has_browser_work, target):
                    yield TriggerEvent({"status": "work"})
                    return
            except StorageError as error:
                self.log.warning("page slots: Redis unavailable for now: %s", error)
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "idle"})
                return
            await asyncio.sleep(min(self.poll_seconds, max(0.0, self.deadline - time.time())))


class BrowserWorkSensor(BaseSensorOperator):
    """Passes when there is browser work, live slots or slots to reconcile; skips the run otherwise."""

    def __init__(self, *, deferrable: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", SENSOR_POLL_SECONDS)
        kwargs.setdefault("timeout", get_settings().page_slots_sensor_wait_seconds)  # within the minute
        kwargs.setdefault("soft_fail", True)
        super().__init__(**kwargs)
        self.deferrable = deferrable

    def poke(self, context: Any) -> bool:
        from harvester.connections import resolve_redis

        return has_browser_work(resolve_redis(REDIS_CONNECTION_ID, get_settings()))

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            self.log.info("browser work or slots to reconcile: running the page-slot jobs")
            return None
        self.defer(
            trigger=BrowserWorkTrigger(REDIS_CONNECTION_ID, float(self.poke_interval),
                                       time.time() + float(self.timeout)),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + 3 * float(self.poke_interval)),
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any]) -> None:
        if event.get("status") != "work":
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"no browser work and no page slots for {self.timeout:.0f}s: nothing to do")
        self.log.info("browser work arrived: running the page-slot jobs")


def run_step(step: str) -> dict[str, Any]:
    """One of the seed's jobs; its story goes to the task log, what it changed to XCom."""
    import logging

    manager = _manager()
    report = {"allocate_page_slots": manager.allocate, "prepare_page_slots": manager.prepare,
              "close_idle_page_slots": manager.close_idle}[step]()
    log = logging.getLogger("harvester.pageslots")
    log.info("%s: %s", step, report.story)
    for error in report.errors:
        log.error("%s: %s", step, error)
    return report.as_dict()


def build_page_slots_dag() -> DAG:
    with DAG(
        dag_id=DAG_ID,
        description="Allocate, prepare and close browser page slots per country (every minute)",
        schedule="* * * * *",
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=["harvester", "pageslots", "browser"],
        default_args={"owner": "harvester", "retries": 0},
        dagrun_timeout=timedelta(minutes=5),
        doc_md=__doc__,
    ) as dag:
        previous = BrowserWorkSensor(task_id="wait_for_browser_work")
        for step in STEPS:
            task = PythonOperator(task_id=step, python_callable=run_step, op_args=[step])
            previous >> task
            previous = task
    return dag
