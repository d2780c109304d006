"""Celery task events: Flower (and `celery events`) show every task a worker runs, once events are on
(HARVESTER_CELERY_TASK_EVENTS, or Flower's enable_events when it starts)."""

from __future__ import annotations

import threading

import pytest
from harvester.distributor.service import SCRAPE_TASK, CeleryPublisher, celery_app_for
from harvester.workers.celery_app import create_app

pytestmark = pytest.mark.integration


def test_a_worker_sends_task_events(harvester_settings, celery_worker_factory, monkeypatch) -> None:
    monkeypatch.setenv("HARVESTER_CELERY_TASK_EVENTS", "true")
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
    assert "task-sent" in seen and "task-received" in seen and "task-started" in seen


def test_the_distributors_published_batches_send_task_sent_events(harvester_settings) -> None:
    """The distributor publishes with its own publish-only app (one pipelined producer batch): each
    message it sends carries a task-sent event, so Flower shows a batch from the moment it is queued."""
    app = create_app()
    sent: list[dict] = []
    expected = 3  # 5 tasks of one source in messages of 2

    def on_sent(event: dict) -> None:
        sent.append(event)
        if len(sent) >= expected:
            receiver.should_stop = True

    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"task-sent": on_sent})
        thread = threading.Thread(target=lambda: receiver.capture(limit=None, timeout=30), daemon=True)
        thread.start()
        threading.Event().wait(1)  # the receiver binds its queue before the batch is published
        publisher = CeleryPublisher(celery_app_for(harvester_settings), batch_size=2)
        tasks = [{"task_id": f"events-{n}", "source": "events_demo", "url": f"http://example.test/{n}"}
                 for n in range(5)]
        assert publisher.publish([("default", tasks)]) == expected
        thread.join(30)
    assert len(sent) == expected, f"task-sent events: {sent}"
    assert {event["name"] for event in sent} == {SCRAPE_TASK}
    assert {event["queue"] for event in sent} == {"default"}
    assert sorted(event["args"] for event in sent) == ["[<1 tasks of events_demo>]", "[<2 tasks of events_demo>]",
                                                        "[<2 tasks of events_demo>]"]
