"""Which registered sources have work, without looking at every one of them each round.

At 5,000 registered sources of which a few hundred have work, reading every source's intake and delayed
retries each round (three commands a source) cost more than the admission it served (docs/benchmarks.md,
``admission_ratio_5000``). So every write that can give a source work (a push, a retry, a reaped or returned
lease, a requeue) adds the source to ``SOURCES_WITH_WORK`` after the write, in the same pipeline
(:func:`harvester.distributor.store.wake_distributors`), and a round reads only those sources. A source found
with nothing to admit and no retry delayed leaves the set, through :meth:`ReadyWork.drop_idle`, which takes it
out first and looks again after, so a push racing the removal puts it back either way.

What the set cannot see (a task pushed by a tool straight into a list, a set lost with an old Redis) the
sweep catches: every ``WORK_SWEEP_SECONDS``, and at start and after an outage, the round reads every source.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import redis

from harvester.distributor.registry import RegisteredSource
from harvester.errors import redis_storage_errors
from harvester.redis_keys import SOURCES_WITH_LEASES, SOURCES_WITH_WORK, SourceKeys
from harvester.redis_scripts import text

__all__ = ["WORK_SWEEP_SECONDS", "LeasedSources", "ReadyWork", "WorkLook", "drop_unless_busy"]

WORK_SWEEP_SECONDS = 30.0  # every registered source is read at least this often


@dataclass(frozen=True)
class WorkLook:
    """One round's look at its destinations and its sources with work."""

    depths: dict[str, int]  # destination -> Celery messages waiting there
    ready: dict[str, int]  # source looked at -> tasks it could admit now (intake plus retries due)
    retry_due_in: dict[str, float]  # source with nothing ready -> seconds until its earliest retry is due


class ReadyWork:
    """The sources with work, as one distributor reads them (see the module docstring)."""

    def __init__(self, client: redis.Redis, publish_batch_size: int) -> None:
        self.client = client
        self.publish_batch_size = publish_batch_size
        self._sweep_at = float("-inf")

    def sweep_soon(self) -> None:
        """Read every source at the next look (Redis is back: the set may be older than the lists)."""
        self._sweep_at = float("-inf")

    @redis_storage_errors()
    def look(self, sources: list[RegisteredSource], destinations: Mapping[str, bool], now: float) -> WorkLook:
        """Messages waiting per destination (``destinations``: name -> it holds tasks, not messages of
        ``publish_batch_size``), and per source with work (``now``: the Redis clock, s) what it could admit now,
        in one round trip after reading the set; sources found idle leave it."""
        sweep = time.monotonic() >= self._sweep_at
        if sweep:
            looked = sources
        else:
            members = {text(name) for name in self.client.smembers(SOURCES_WITH_WORK)}
            looked = [source for source in sources if source.name in members]
        queues = sorted(destinations)
        pipeline = self.client.pipeline(transaction=False)
        for name in queues:
            pipeline.llen(name)
        for source in looked:
            keys = SourceKeys(source.name)
            pipeline.llen(keys.intake)
            pipeline.get(keys.host_parked)  # tasks admission moved to their hosts' queues: work too
            pipeline.zcount(keys.delayed, "-inf", now)
            pipeline.zrange(keys.delayed, 0, 0, withscores=True)
        replies = pipeline.execute()
        batch = self.publish_batch_size
        depths = {queue: -(-int(depth) // batch) if destinations[queue] else int(depth)  # slot lists hold tasks
                  for queue, depth in zip(queues, replies[: len(queues)], strict=True)}
        per_source = replies[len(queues):]
        ready: dict[str, int] = {}
        retry_due_in: dict[str, float] = {}
        idle: list[str] = []
        for i, source in enumerate(looked):
            pending, parked, due_now, earliest = per_source[4 * i: 4 * i + 4]
            ready[source.name] = int(pending) + int(parked or 0) + int(due_now)
            if earliest and ready[source.name] == 0:
                retry_due_in[source.name] = max(0.0, float(earliest[0][1]) - now)
            elif not earliest and ready[source.name] == 0:
                idle.append(source.name)
        if sweep:
            self._sweep_at = time.monotonic() + WORK_SWEEP_SECONDS
            if with_work := [name for name in ready if name not in idle]:
                self.client.sadd(SOURCES_WITH_WORK, *with_work)
        if idle:
            self.drop_idle(idle)
        return WorkLook(depths, ready, retry_due_in)

    def drop_idle(self, names: list[str]) -> list[str]:
        """Take sources seen with no work out of the set, then look again and put back any that got work
        meanwhile: a push adds its source after writing its list, so it lands either before the second look
        (which sees it) or after the removal (which it undoes). Returns the sources put back."""
        return drop_unless_busy(self.client, SOURCES_WITH_WORK, names, _work_sizes)


class LeasedSources:
    """The sources with tasks reserved or leased (``SOURCES_WITH_LEASES``): the ones the reaper and the lost-message
    probe look at, instead of every registered source (at 5,000 sources a reap of all took 0.6 s every
    ``reap_interval_seconds``). Admission adds a source after it admitted (:meth:`add`, the store's
    ``admit_many``); only admission puts a task into an empty ``active``, so a source with reservations or
    leases is always here; one found with none leaves (:meth:`drop_empty`); and every ``WORK_SWEEP_SECONDS``
    (at start, after an outage) every source is looked at, for leases an older Harvester or a lost reply left."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._sweep_at = float("-inf")

    def sweep_soon(self) -> None:
        self._sweep_at = float("-inf")

    @redis_storage_errors()
    def add(self, names: list[str]) -> None:
        if names:
            self.client.sadd(SOURCES_WITH_LEASES, *names)

    @redis_storage_errors()
    def members(self) -> set[str]:
        return {text(name) for name in self.client.smembers(SOURCES_WITH_LEASES)}

    def to_reap(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` that have (or may have) reservations or leases: all of them when a sweep is due."""
        names = sorted(names)
        if time.monotonic() >= self._sweep_at:
            self._sweep_at = time.monotonic() + WORK_SWEEP_SECONDS
            return names
        members = self.members()
        return [name for name in names if name in members]

    @redis_storage_errors()
    def drop_empty(self, names: list[str]) -> list[str]:
        """Keep the set to the sources with reservations or leases: those of ``names`` with an empty ``active``
        leave it (out first, looked at again, put back if admission added one meanwhile); the rest join it (a
        sweep found them). Returns the sources kept."""
        if not names:
            return []
        pipeline = self.client.pipeline(transaction=False)
        for name in names:
            pipeline.zcard(SourceKeys(name).active)
        counts = pipeline.execute()
        busy = [name for name, count in zip(names, counts, strict=True) if int(count)]
        self.add(busy)
        empty = [name for name, count in zip(names, counts, strict=True) if not int(count)]
        return busy + drop_unless_busy(self.client, SOURCES_WITH_LEASES, empty, _lease_sizes)


@redis_storage_errors()
def drop_unless_busy(client: redis.Redis, index: str, names: list[str],
                     queue_sizes: Callable[[redis.client.Pipeline, SourceKeys], int]) -> list[str]:
    """Take ``names`` out of the set ``index``, then look at each one's collections (``queue_sizes`` queues one
    size command for each and says how many) and put back those not all empty. A writer adds its source after
    writing, so it lands before the look (which sees it) or after the removal (which it undoes): none is lost.
    Returns those put back."""
    if not names:
        return []
    client.srem(index, *names)
    pipeline = client.pipeline(transaction=False)
    widths = [queue_sizes(pipeline, SourceKeys(name)) for name in names]
    replies = iter(pipeline.execute())
    back = [name for name, width in zip(names, widths, strict=True)
            if sum(int(next(replies) or 0) for _ in range(width))]
    if back:
        client.sadd(index, *back)
    return back


def _work_sizes(pipeline: redis.client.Pipeline, keys: SourceKeys) -> int:
    pipeline.llen(keys.intake)
    pipeline.get(keys.host_parked)
    pipeline.zcard(keys.delayed)
    return 3


def _lease_sizes(pipeline: redis.client.Pipeline, keys: SourceKeys) -> int:
    pipeline.zcard(keys.active)
    return 1
