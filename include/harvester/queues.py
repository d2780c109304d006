"""The names of Harvester's Celery queues, in one leaf module: the source model picks a queue, the
Celery app declares them, the distributor publishes to them and page-slot workers consume them, and
none of those needs to import another to agree on a name. A browser source's tasks are no Celery
messages: the distributor hands them to the page slots of each task's country (``TaskMessage.country``);
its queue is ``pageslots``, whose workers host those slots."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kombu import Queue

PRIORITY_QUEUE = "priority"
DEFAULT_QUEUE = "default"
PAGESLOTS_QUEUE = "pageslots"
EXCHANGE_NAME = "harvester"
DECLARED_QUEUES = (PRIORITY_QUEUE, DEFAULT_QUEUE, PAGESLOTS_QUEUE)


def kombu_queue(name: str) -> Queue:
    """A queue as every Harvester process declares it: durable, bound to the harvester exchange under its
    own name (kombu loads here, on first use: the source model imports this module on every DAG parse)."""
    from kombu import Exchange, Queue

    return Queue(name, Exchange(EXCHANGE_NAME, type="direct", durable=True), routing_key=name, durable=True)
