"""Admitted browser tasks: how they reach page slots, and the allocator's bookkeeping of them.

A slot is a long-running process that serves one country; it pops that country's tasks one at a time
when its page is ready, so a task waits for a *ready page*, never for a worker, and the allocator sees
each country's backlog. The distributor admits browser tasks exactly as HTTP tasks (same limits, same
leases) and, instead of sending ``pageslots.<COUNTRY>`` Celery messages, pushes them to the country's
Redis list and records them as pending. A slot marks a task running when it starts it and completed when
it is settled; only the most recent ``allocation_sample_size`` (3000) tasks are kept, as the seed caps
them. A slot that dies holding a task loses nothing: the lease expires and the reaper re-queues it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from harvester.distributor.scripts import ScriptPipeline, Scripts
from harvester.redis_keys import PageSlotKeys

KEYS = PageSlotKeys()
BROWSER_QUEUE_PREFIX = "pageslots."
TRACK_CHUNK = 500  # tasks per Lua call (ARGV stays small)


def task_member(source: str, task_id: str) -> str:
    return f"{source}|{task_id}"


def browser_country(queue: str) -> str | None:
    """The country of a source's queue name ``pageslots.<COUNTRY>``, or None for an HTTP queue."""
    if queue.startswith(BROWSER_QUEUE_PREFIX) and len(queue) > len(BROWSER_QUEUE_PREFIX):
        return queue[len(BROWSER_QUEUE_PREFIX):]
    return None


def depth_key(queue: str) -> str:
    """The Redis list whose length is the queue's backlog (the country list for browser queues)."""
    country = browser_country(queue)
    return KEYS.browser_tasks(country) if country else queue


@dataclass(frozen=True)
class CountryCensus:
    """One country's recent browser tasks."""

    pending: int = 0  # admitted, waiting for a slot
    running: int = 0  # in a slot now
    completed: int = 0
    oldest_pending_wait_seconds: float = 0.0

    @property
    def active(self) -> int:
        """Pending plus running: what preparation starts slots for."""
        return self.pending + self.running


class BrowserTaskBook:
    """Pending / running / completed of the recent browser tasks, kept in Redis."""

    def __init__(self, client: redis.Redis, sample_size: int = 3000, scripts: Scripts | None = None) -> None:
        self.redis = client
        self.sample_size = sample_size
        self.scripts = scripts or Scripts(client)

    def pending(self, tasks: Iterable[tuple[str, str]], pipeline: ScriptPipeline | None = None) -> None:
        """Record admitted tasks, given as (member, country), as pending from now (queued on ``pipeline``)."""
        entries = list(tasks)
        for start in range(0, len(entries), TRACK_CHUNK):
            arguments: list[str] = []
            for member, country in entries[start:start + TRACK_CHUNK]:
                arguments += [member, country]
            self._track("pending", arguments, pipeline)

    def running(self, members: Iterable[str]) -> None:
        self._track("running", list(members))

    def completed(self, members: Iterable[str]) -> None:
        self._track("completed", list(members))

    def _track(self, state: str, entries: list[str], pipeline: ScriptPipeline | None = None) -> None:
        if not entries:
            return
        if pipeline is None:
            self.scripts.call("track_browser_tasks", KEYS, sample_size=self.sample_size, state=state,
                              entries=entries)
        else:
            pipeline.call("track_browser_tasks", KEYS, sample_size=self.sample_size, state=state, entries=entries)

    def census(self) -> dict[str, CountryCensus]:
        """Per country: pending, running, completed and the oldest pending wait (by the Redis clock)."""
        pipeline = self.redis.pipeline(transaction=True)
        pipeline.time()
        pipeline.hgetall(KEYS.recent_task_states)
        (seconds, microseconds), entries = pipeline.execute()
        now = seconds + microseconds / 1_000_000
        return census_of((entry.decode() if isinstance(entry, bytes) else entry for entry in entries.values()), now)


def census_of(entries: Iterable[str], now: float) -> dict[str, CountryCensus]:
    """Fold "country|state|admitted at" entries into per-country counts."""
    counts: dict[str, list[float]] = {}
    for entry in entries:
        country, state, admitted = entry.split("|")
        numbers = counts.setdefault(country, [0, 0, 0, 0.0])
        if state == "pending":
            numbers[0] += 1
            numbers[3] = max(numbers[3], now - float(admitted))
        elif state == "running":
            numbers[1] += 1
        else:
            numbers[2] += 1
    return {country: CountryCensus(int(p), int(r), int(c), w) for country, (p, r, c, w) in counts.items()}


def push_browser_tasks(client: redis.Redis, country: str, tasks: list[dict[str, Any]], sample_size: int,
                       pipeline: ScriptPipeline | None = None) -> None:
    """Append admitted tasks to the country's list and record them as pending, in one round trip
    (queued on ``pipeline`` when given, from :meth:`Scripts.run_pipeline`)."""
    if not tasks:
        return
    if pipeline is None:
        Scripts(client).run_pipeline(lambda own: push_browser_tasks(client, country, tasks, sample_size, own))
        return
    pipeline.pipeline.rpush(KEYS.browser_tasks(country), *(json.dumps(task, separators=(",", ":")) for task in tasks))
    BrowserTaskBook(client, sample_size, pipeline.scripts).pending(
        ((task_member(task["source"], task["task_id"]), country) for task in tasks), pipeline=pipeline)
