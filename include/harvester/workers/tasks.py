"""Thin Celery tasks; the work itself lives in harvester.workers.batch, harvester.scraping and
harvester.storage. Tasks are idempotent (outputs are upserts) and acknowledged late (celery_app)."""

from __future__ import annotations

from typing import Any

from celery.exceptions import WorkerLostError
from celery.signals import task_failure, worker_process_init

from harvester.pageslots import connect_slot_hosting
from harvester.workers.celery_app import app

connect_slot_hosting()  # a pageslots worker's supervisor: capacity, resets, reaping


@worker_process_init.connect
def _prepare_process(**_: Any) -> None:
    """Build the process's clients and import the scraping stack before the first task, not during it; then keep
    what start-up made out of the garbage collector's full walks (:func:`freeze_startup_objects`)."""
    from harvester.workers.batch import batch_runner, freeze_startup_objects

    batch_runner()
    freeze_startup_objects()


@app.task(name="harvester.ping")
def ping() -> str:
    """Liveness probe used by `make status` and the tests to see that a worker consumes its queue."""
    return "pong"


@app.task(name="harvester.host_page_slot", acks_late=False, reject_on_worker_lost=False, ignore_result=True)
def host_page_slot(slot_id: str) -> dict[str, Any]:
    """Host one page slot until it closes (harvester.pageslots.host). Acknowledged early: on the Redis
    broker a long unacknowledged task is redelivered after the visibility timeout, and a slot must never
    run twice (a redelivery would also be refused by the slot record's claim)."""
    from harvester.pageslots import host_slot
    from harvester.workers.batch import batch_runner
    from harvester.workers.slot_pipeline import WorkerSlotPipeline

    return host_slot(slot_id, WorkerSlotPipeline(batch_runner()), worker=host_page_slot.request.hostname)


@app.task(name="harvester.scrape_batch")
def scrape_batch(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Fetch, extract and store a batch of admitted tasks of one source (published by the distributor)."""
    from harvester.workers.batch import batch_runner

    return batch_runner().run(messages)


@task_failure.connect(sender=scrape_batch)
def _batch_lost(exception: BaseException | None = None, args: Any = None, **_: Any) -> None:
    """In the worker's main process: the pool process running this batch died. Its message is acknowledged
    (never redelivered); its tasks go back through admission (harvester.workers.lost)."""
    if not isinstance(exception, WorkerLostError) or not args:
        return
    from harvester.workers.lost import lost_batch_handler

    try:
        lost_batch_handler().settle(args[0])
    except Exception:  # Redis down as well: the leases expire and the reaper brings the tasks back
        import logging

        logging.getLogger(__name__).exception("could not hand back the tasks of a lost batch")
