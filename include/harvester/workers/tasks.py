"""Thin Celery tasks; the work itself lives in harvester.scraping and harvester.storage."""

from __future__ import annotations

from harvester.workers.celery_app import app


@app.task(name="harvester.ping")
def ping() -> str:
    """Liveness probe used by `make status` and the tests to see that a worker consumes its queue."""
    return "pong"
