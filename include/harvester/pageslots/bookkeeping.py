"""The allocator's view of browser work: the most recent browser tasks and their states, per country.

The distributor records each admitted browser task as pending (with the Redis server time), a slot marks
it running when it starts it and completed when it is settled; only the most recent
``allocation_sample_size`` (3000) tasks are kept, as the seed caps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from harvester.pageslots.allocation import CountryTasks
from harvester.pageslots.scripts import PageSlotScripts
from harvester.redis_keys import PageSlotKeys

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

    def as_country_tasks(self) -> CountryTasks:
        """Allocation scores every task not completed as pending (the seed's ``isCompleted() ? 10 : 30``)."""
        return CountryTasks(pending=self.active, completed=self.completed,
                            oldest_pending_wait_seconds=self.oldest_pending_wait_seconds)


class BrowserTaskBook:
    """Pending / running / completed of the recent browser tasks, kept in Redis."""

    def __init__(self, client: redis.Redis, sample_size: int = 3000) -> None:
        self.redis = client
        self.sample_size = sample_size
        self.scripts = PageSlotScripts(client)

    def pending(self, tasks: Iterable[tuple[str, str]], pipeline: redis.client.Pipeline | None = None) -> None:
        """Record admitted tasks, given as (member, country), as pending from now."""
        entries = list(tasks)
        for start in range(0, len(entries), TRACK_CHUNK):
            args: list[str] = []
            for member, country in entries[start:start + TRACK_CHUNK]:
                args += [member, country]
            self._track("pending", args, pipeline)

    def running(self, members: Iterable[str]) -> None:
        self._track("running", list(members))

    def completed(self, members: Iterable[str]) -> None:
        self._track("completed", list(members))

    def _track(self, state: str, args: list[str], pipeline: redis.client.Pipeline | None = None) -> None:
        if not args:
            return
        self.scripts["tasks_track"](keys=[KEYS.recent_tasks, KEYS.recent_task_states],
                                    args=[self.sample_size, state, *args], client=pipeline)

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
