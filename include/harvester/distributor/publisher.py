"""Publishing admitted HTTP tasks to Celery without importing worker code.

The distributor publishes through a Celery app of its own (:func:`celery_app_for`) in the message format
the workers' app (``harvester.workers.celery_app``) consumes: ``harvester.scrape_batch`` messages of at
most ``publish_batch_size`` tasks of one source, through one pipelined kombu producer batch per round.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import redis
from celery import Celery
from kombu import Queue
from kombu.exceptions import BatchPublishError

from harvester.connections import celery_broker
from harvester.errors import StorageUnavailableError
from harvester.queues import kombu_queue
from harvester.settings import HarvesterSettings

__all__ = ["SCRAPE_TASK", "SOFT_LIMIT_MARGIN_SECONDS", "CeleryPublisher", "celery_app_for"]

SCRAPE_TASK = "harvester.scrape_batch"
SOFT_LIMIT_MARGIN_SECONDS = 15.0  # a batch past its soft limit gets this long to hand its tasks back


def celery_app_for(settings: HarvesterSettings) -> Celery:
    """A Celery app that only publishes, to ``settings.redis_url`` (or its sentinels' primary), in the message
    format the workers' app (``harvester.workers.celery_app``) consumes: the distributor never imports worker code."""
    broker_url, sentinel_options = celery_broker(settings)  # sentinel:// and its master_name when sentinels are set
    app = Celery("harvester", broker=broker_url, set_as_current=False)
    app.conf.update(broker_transport_options=sentinel_options, task_serializer="json", accept_content=["json"],
                    result_backend=None, task_ignore_result=True,
                    broker_connection_retry_on_startup=True,
                    # send_task then publishes a task-sent event per message through the same producer
                    # batch (Celery's event dispatcher), so Flower shows each batch from the moment it is queued
                    task_send_sent_event=True)
    return app


class CeleryPublisher:
    """Sends admitted tasks as ``harvester.scrape_batch`` messages without importing worker code."""

    def __init__(self, app: Celery, batch_size: int,
                 time_limit_for: Callable[[str, int], float] | None = None,
                 messages_for: Callable[[str, int], int] | None = None) -> None:
        self.app = app
        self.batch_size = batch_size
        self.time_limit_for = time_limit_for  # (source, tasks in the message) -> hard time limit (s)
        # (source, tasks to publish) -> the fewest messages to spread them over (None: as batch_size makes them)
        self.messages_for = messages_for
        self._queues: dict[str, Queue] = {}

    def queue(self, name: str) -> Queue:
        """The queue as celery_app declares its queues: bound to the harvester exchange under its own name.

        Messages are routed with no exchange named, so Celery sends them through the anonymous direct
        exchange straight to the list named ``name`` (Celery's own default for direct queues). Routing
        through the "harvester" exchange would depend on kombu's binding set in Redis and on kombu's
        in-process memory of having declared it: once that set is lost (a flush, a restart without AOF)
        every message would go to kombu's undeliverable list while the distributor believed it published.
        """
        if name not in self._queues:
            self._queues[name] = kombu_queue(name)
        return self._queues[name]

    def publish(self, work: Iterable[tuple[str, list[dict[str, Any]]]]) -> int:
        """Publish (queue, task dicts of ONE source) pairs in one pipelined batch; returns Celery messages sent."""
        work = list(work)
        try:
            with self.app.producer_or_acquire() as producer, producer.batch(max_size=1000):
                self._send(producer, work)
        except BatchPublishError as error:
            # kombu's pipelined batch met a dead or failed-over broker: an outage the distributor waits out (its
            # unconfirmed reservations come back after publish_grace_seconds; a message sent twice is dropped at
            # the worker's start call). Anything else that failed the batch is not an outage and is raised as is.
            if isinstance(error.__cause__, redis.ConnectionError | redis.TimeoutError | OSError):
                raise StorageUnavailableError(f"{error} ({type(error.__cause__).__name__}: {error.__cause__})"
                                              ) from error
            raise
        return sum(len(self.split(tasks)) for _, tasks in work)

    def split(self, tasks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """One source's tasks as messages: at most ``batch_size`` a message, and over at least the messages
        ``messages_for`` asks (a source that follows chains: see ``chain_message_spread``), sizes as even as they go.
        A task that must run alone (``run_alone``: its last batch's process died beside it) is a message of its own."""
        alone = [[task] for task in tasks if task.get("run_alone")]
        if alone:
            return alone + self.split([task for task in tasks if not task.get("run_alone")])
        if not tasks:
            return []
        messages = -(-len(tasks) // self.batch_size)
        asked = self.messages_for(tasks[0]["source"], len(tasks)) if self.messages_for and tasks else 1
        spread = min(asked, len(tasks))
        if spread <= messages:
            return [tasks[start:start + self.batch_size] for start in range(0, len(tasks), self.batch_size)]
        size, extra = divmod(len(tasks), spread)
        bounds = [index * size + min(index, extra) for index in range(spread + 1)]
        return [tasks[start:end] for start, end in itertools.pairwise(bounds)]

    def _send(self, producer: Any, work: list[tuple[str, list[dict[str, Any]]]]) -> None:
        for queue, tasks in work:
            for batch in self.split(tasks):
                limits: dict[str, float] = {}
                if self.time_limit_for is not None:
                    hard = self.time_limit_for(batch[0]["source"], len(batch))
                    limits = {"time_limit": hard, "soft_time_limit": max(1.0, hard - SOFT_LIMIT_MARGIN_SECONDS)}
                self.app.send_task(
                    SCRAPE_TASK, args=[batch], queue=self.queue(queue), producer=producer, **limits,
                    # a short argsrepr: Celery's default saferepr of the batch costs more than the rest
                    # of the publish put together, and logs/Flower only need to know what it holds
                    argsrepr=f"[<{len(batch)} tasks of {batch[0]['source']}>]", kwargsrepr="{}",
                )
