"""How admitted browser tasks reach page slots: a Redis list per country, not a Celery queue.

A slot is a long-running process that serves one country; it pops that country's tasks one at a time
when its page is ready (``slot_begin_task``), so a task waits for a *ready page*, never for a worker, and
the allocator sees each country's backlog. The distributor admits browser tasks exactly as HTTP tasks
(same limits, same leases) and, instead of sending ``pageslots.<COUNTRY>`` Celery messages, pushes them
here and records them as pending for the allocator. A slot that dies holding a task loses nothing: the
task's lease expires and the reaper puts it back in intake.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.redis_keys import PageSlotKeys

KEYS = PageSlotKeys()
BROWSER_QUEUE_PREFIX = "pageslots."


def browser_country(queue: str) -> str | None:
    """The country of a source's queue name ``pageslots.<COUNTRY>``, or None for an HTTP queue."""
    if queue.startswith(BROWSER_QUEUE_PREFIX) and len(queue) > len(BROWSER_QUEUE_PREFIX):
        return queue[len(BROWSER_QUEUE_PREFIX):]
    return None


def depth_key(queue: str) -> str:
    """The Redis list whose length is the queue's backlog (the country list for browser queues)."""
    country = browser_country(queue)
    return KEYS.browser_tasks(country) if country else queue


def push_browser_tasks(client: redis.Redis, country: str, tasks: list[dict[str, Any]], sample_size: int,
                       pipeline: redis.client.Pipeline | None = None) -> None:
    """Append admitted tasks to the country's list and record them as pending, in one round trip."""
    if not tasks:
        return
    own = pipeline is None
    pipe = pipeline if pipeline is not None else client.pipeline(transaction=False)
    pipe.rpush(KEYS.browser_tasks(country), *(json.dumps(task, separators=(",", ":")) for task in tasks))
    BrowserTaskBook(client, sample_size).pending(
        ((task_member(task["source"], task["task_id"]), country) for task in tasks), pipeline=pipe)
    if own:
        pipe.execute()
