"""How admitted browser tasks reach page slots: the distributor's hand-off to the slots of a country.

A slot is a long-running process that serves one country; it pops that country's tasks one at a time
when its page is ready, so a task waits for a *ready page*, never for a worker, and the allocator sees
each country's backlog. The distributor admits browser tasks exactly as HTTP tasks (same limits, same
leases) and, instead of sending Celery messages, hands them over here: appended to the Redis list of
the country each task names (``TaskMessage.country``) and recorded as pending in the allocator's book,
in the distributor's own round trip. A slot that dies holding a task loses nothing: the lease expires
and the reaper re-queues it.

The distributor declares what it needs (``harvester.distributor.BrowserHandoff``) and never imports
this component; whoever starts a distributor gives it a :class:`PageSlotHandoff`.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.redis_keys import PageSlotKeys
from harvester.redis_scripts import ScriptPipeline
from harvester.settings import HarvesterSettings

__all__ = ["PageSlotHandoff"]

KEYS = PageSlotKeys()


class PageSlotHandoff:
    """The page slots' side of the distributor's hand-off (``harvester.distributor.BrowserHandoff``)."""

    def __init__(self, client: redis.Redis, sample_size: int = 3000) -> None:
        self.book = BrowserTaskBook(client, sample_size)

    @classmethod
    def from_settings(cls, client: redis.Redis, settings: HarvesterSettings) -> PageSlotHandoff:
        return cls(client, settings.allocation_sample_size)

    @staticmethod
    def backlog_key(country: str) -> str:
        """The country's task list: the slots of ``country`` pop it (its length is the backlog, in tasks)."""
        return KEYS.browser_tasks(country)

    def hand_over(self, pipeline: ScriptPipeline, country: str, tasks: list[dict[str, Any]]) -> None:
        """Queue the tasks' append to ``country``'s list and their pending records on ``pipeline``."""
        if not tasks:
            return
        pipeline.pipeline.rpush(self.backlog_key(country), *(json.dumps(task, separators=(",", ":"))
                                                             for task in tasks))
        self.book.pending(((task_member(task["source"], task["task_id"]), country) for task in tasks),
                          pipeline=pipeline)

    def push(self, country: str, tasks: list[dict[str, Any]]) -> None:
        """:meth:`hand_over` in a round trip of its own (tools and tests)."""
        self.book.scripts.run_pipeline(lambda pipeline: self.hand_over(pipeline, country, tasks))
