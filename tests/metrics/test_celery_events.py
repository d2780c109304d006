"""Celery task events are on, so Flower (and `celery events`) show every task a worker runs."""

from __future__ import annotations

import threading

import pytest
from harvester.workers.celery_app import create_app

pytestmark = pytest.mark.integration


def test_a_worker_sends_task_events(harvester_settings, celery_worker_factory) -> None:
    app = create_app()  # the workers' app, on the test Redis (HARVESTER_REDIS_URL)
    celery_worker_factory(queues="default", concurrency=1)
    seen: list[str] = []
    done = threading.Event()

    def on_event(event: dict) -> None:
        seen.append(event["type"])
        if event["type"] == "task-succeeded":
            done.set()

    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"*": on_event})
        thread = threading.Thread(target=lambda: receiver.capture(limit=None, timeout=30), daemon=True)
        thread.start()
        threading.Event().wait(1)  # the receiver binds its queue before the task is sent
        app.send_task("harvester.ping", queue="default")
        assert done.wait(30), f"no task-succeeded event; saw {seen}"
        receiver.should_stop = True
    # task-sent comes from the sending app (task_send_sent_event); the distributor's publish-only app
    # does not send it, so Flower shows its batches from task-received on
    assert "task-sent" in seen and "task-received" in seen and "task-started" in seen
