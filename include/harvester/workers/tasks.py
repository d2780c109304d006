"""Thin Celery tasks; the work itself lives in harvester.workers.batch, harvester.scraping and
harvester.storage. Tasks are idempotent (outputs are upserts) and acknowledged late (celery_app)."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_process_init

from harvester.workers.celery_app import app


@worker_process_init.connect
def _prepare_process(**_: Any) -> None:
    """Build the process's clients and import the scraping stack before the first task, not during it."""
    from harvester.workers.batch import batch_runner

    batch_runner()


@app.task(name="harvester.ping")
def ping() -> str:
    """Liveness probe used by `make status` and the tests to see that a worker consumes its queue."""
    return "pong"


@app.task(name="harvester.scrape_batch")
def scrape_batch(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Fetch, extract and store a batch of admitted tasks of one source (published by the distributor)."""
    from harvester.workers.batch import batch_runner

    return batch_runner().run(messages)
