"""The allocator's bookkeeping of recent browser tasks: pending (handed to a country's slots), running
(in a slot now) and completed, kept in Redis by ``lua/track_browser_tasks.lua`` and turned into what
allocation scores.

The distributor hands admitted tasks over through :class:`harvester.pageslots.handoff.PageSlotHandoff`
(pending from then); a slot marks a task running when it starts it (``slot_begin_task``) and completed
when it is settled. Only the most recent ``allocation_sample_size`` (3000) tasks are kept, as the seed
caps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from harvester.pageslots.allocation import CountryTasks
from harvester.pageslots.scripts import page_slot_scripts
from harvester.redis_keys import PageSlotKeys
from harvester.redis_scripts import ScriptPipeline, Scripts, text

__all__ = ["BrowserTaskBook", "CountryCensus", "census_of", "country_tasks", "task_member"]

KEYS = PageSlotKeys()
TRACK_CHUNK = 500  # tasks per Lua call (ARGV stays small)


def task_member(source: str, task_id: str) -> str:
    return f"{source}|{task_id}"


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
        self.scripts = scripts or page_slot_scripts(client)

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
        arguments = {"sample_size": self.sample_size, "state": state, "entries": entries}
        if pipeline is None:
            self.scripts.call("track_browser_tasks", KEYS, **arguments)
        else:
            self.scripts.queue(pipeline, "track_browser_tasks", KEYS, **arguments)

    def census(self) -> dict[str, CountryCensus]:
        """Per country: pending, running, completed and the oldest pending wait (by the Redis clock)."""
        pipeline = self.redis.pipeline(transaction=True)
        pipeline.time()
        pipeline.hgetall(KEYS.recent_task_states)
        (seconds, microseconds), entries = pipeline.execute()
        now = seconds + microseconds / 1_000_000
        return census_of((text(entry) for entry in entries.values()), now)


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


def country_tasks(census: CountryCensus) -> CountryTasks:
    """Allocation scores every task not completed as pending (the seed's ``isCompleted() ? 10 : 30``)."""
    return CountryTasks(pending=census.active, completed=census.completed,
                        oldest_pending_wait_seconds=census.oldest_pending_wait_seconds)
