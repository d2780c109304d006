"""The one Celery app of Harvester: queues, exchanges and routes declared here and nowhere else.

Workers start with ``celery -A harvester.workers.celery_app worker -Q <queue>``.
"""

from __future__ import annotations

from celery import Celery
from kombu import Exchange, Queue

from harvester.connections import celery_broker
from harvester.queues import (
    DECLARED_QUEUES,
    DEFAULT_QUEUE,
    EXCHANGE_NAME,
    PAGESLOTS_QUEUE,
    PRIORITY_QUEUE,
    kombu_queue,
)
from harvester.settings import get_settings

__all__ = ["DEFAULT_QUEUE", "PAGESLOTS_QUEUE", "PRIORITY_QUEUE", "app", "create_app", "declared_queues",
           "harvester_exchange"]

harvester_exchange = Exchange(EXCHANGE_NAME, type="direct", durable=True)


def declared_queues() -> tuple[Queue, ...]:
    return tuple(kombu_queue(name) for name in DECLARED_QUEUES)


def create_app() -> Celery:
    settings = get_settings()
    broker_url, sentinel_options = celery_broker(settings)  # sentinel:// and its master_name when sentinels are set
    celery = Celery("harvester", broker=broker_url, include=["harvester.workers.tasks"])
    celery.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        task_acks_late=True,
        # A batch whose pool process died is acknowledged, not redelivered: its tasks go back through
        # admission (harvester.workers.tasks counts the loss; twice and the batch is dead-lettered).
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        # kombu hands an unacknowledged message out again after this (its default is one hour, unset);
        # a redelivered message whose tasks are no longer held is dropped by the worker's start call.
        # kombu looks for such messages every unacked_restore_interval * unacked_restore_throttle seconds
        # (10 * 10 by default): every few seconds instead, so they come back soon after the timeout.
        broker_transport_options={
            "visibility_timeout": settings.celery_visibility_timeout_seconds,
            "unacked_restore_interval": max(1.0, min(10.0, settings.celery_visibility_timeout_seconds / 4)),
            "unacked_restore_throttle": 1,
            **sentinel_options,
        },
        worker_max_memory_per_child=settings.worker_max_memory_per_child_kb,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        task_queues=declared_queues(),
        task_default_exchange=harvester_exchange.name,
        task_default_exchange_type="direct",
        task_default_queue=DEFAULT_QUEUE,
        task_default_routing_key=DEFAULT_QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # Flower turns events on when it starts (and `celery control enable_events` does); the setting sends
        # them from the start. The distributor's task-sent events are always on (one per message).
        worker_send_task_events=settings.celery_task_events,
        task_send_sent_event=True,
    )
    return celery


app = create_app()
