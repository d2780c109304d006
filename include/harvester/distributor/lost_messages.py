"""Queued reservations whose Celery message is lost (celery/celery#4354): found, so no task waits forever.

kombu's Redis transport takes a message with ``BRPOP`` and only then registers it as unacknowledged; a worker
whose main process dies between the two (a host killed, the OOM killer) leaves the message in neither place,
and kombu never hands it out again. Its tasks stay reserved ("queued") until ``queued_lease_seconds`` (three
hours by default) and hold the source's ``max_active`` all that time. So every ``lost_message_check_seconds``
the distributor looks, in one ``MULTI`` (the queue lists and the unacked hash at one instant), for the leases
each Celery message carries; a queued reservation at least that old that no message carries is a suspect, and
one still missing at the next look goes back to intake uncharged (``return_lost.lua``, which leaves it alone if
it was started or admitted again meanwhile; counted ``returned_lost_message``). Two looks, because a message
is in neither place for a moment in kombu's own hands too (between its BRPOP and its registration).

How kombu lays a queue out in Redis (the installed kombu, pinned by ``tests/distributor/test_lost_messages.py``):

- a queue is a list under its own name, plus ``<name>\\x06\\x16<priority>`` lists for priorities 3, 6 and 9
  (``Channel.sep``, ``PRIORITY_STEPS``); each item is the JSON envelope of one message, whose ``body`` is
  ``[args, kwargs, embed]`` as JSON, base64-encoded (``properties.body_encoding``); ``args[0]`` of
  ``harvester.scrape_batch`` is the batch, each task with its ``task_id`` and ``lease_token``;
- a message a consumer took and has not acknowledged is in the hash ``unacked`` (``Channel.unacked_key``:
  delivery tag -> JSON ``[envelope, exchange, routing_key]``) and the sorted set ``unacked_index`` (delivery tag
  -> when it was taken), until it is acknowledged (with ``acks_late``, after the batch ran) or restored to its
  queue (in one transaction) after the visibility timeout;
- no ``global_keyprefix`` (Harvester sets none).

Browser tasks never go through Celery (a country's list of page slots), so only Celery queues are looked at.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptPipeline, Scripts, text
from harvester.settings import HarvesterSettings

__all__ = ["KOMBU_LAYOUT", "KombuRedisLayout", "LostMessageProbe", "leases_in_envelope", "messages_in_flight",
           "queued_reservations", "queued_reservations_of"]

log = logging.getLogger(__name__)
Lease = tuple[str, str]  # task id, fencing token


@dataclass(frozen=True)
class KombuRedisLayout:
    """The key names of kombu's Redis transport (see the module docstring)."""

    unacked_key: str = "unacked"
    separator: str = "\x06\x16"
    priority_steps: tuple[int, ...] = (0, 3, 6, 9)

    def queue_keys(self, queue: str) -> list[str]:
        """The lists of one queue: its own and its priority sub-queues."""
        return [queue, *(f"{queue}{self.separator}{step}" for step in self.priority_steps if step)]


KOMBU_LAYOUT = KombuRedisLayout()


def leases_in_envelope(envelope: Mapping[str, Any]) -> set[Lease]:
    """(task id, token) of every task a kombu message envelope carries; empty for anything else."""
    try:
        body = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        batch = args[0] if args and isinstance(args[0], list) else []
        return {(str(task["task_id"]), str(task["lease_token"])) for task in batch
                if isinstance(task, dict) and "task_id" in task and task.get("lease_token") is not None}
    except (KeyError, IndexError, TypeError, ValueError):  # not one of ours (or not a batch): it carries none
        return set()


@redis_storage_errors()
def messages_in_flight(client: redis.Redis, queues: Iterable[str], layout: KombuRedisLayout = KOMBU_LAYOUT
                       ) -> set[Lease]:
    """The leases carried by every message waiting in ``queues`` or held unacknowledged, read in one MULTI."""
    pipeline = client.pipeline(transaction=True)
    for queue in queues:
        for key in layout.queue_keys(queue):
            pipeline.lrange(key, 0, -1)
    pipeline.hvals(layout.unacked_key)
    *lists, unacked = pipeline.execute()
    leases: set[Lease] = set()
    for raw in (raw for items in lists for raw in items):
        try:
            leases |= leases_in_envelope(json.loads(raw))
        except ValueError:
            continue
    for raw in unacked:
        try:
            envelope = json.loads(raw)[0]
        except (ValueError, IndexError, KeyError):
            continue
        if isinstance(envelope, dict):
            leases |= leases_in_envelope(envelope)
    return leases


def queued_reservations(client: redis.Redis, source: str, older_than: float, queued_lease_seconds: float,
                        now: float) -> dict[str, str]:
    """task id -> token of the source's reservations queued in Celery (state ``q``) for ``older_than`` seconds
    or more (a reservation's deadline is when it was confirmed published plus ``queued_lease_seconds``)."""
    return queued_reservations_of(client, [source], older_than, queued_lease_seconds, now).get(source, {})


@redis_storage_errors()
def queued_reservations_of(client: redis.Redis, sources: Iterable[str], older_than: float,
                           queued_lease_seconds: float, now: float) -> dict[str, dict[str, str]]:
    """:func:`queued_reservations` of many sources (those with any), read in one MULTI: one round trip for
    thousands of sources, where one each held the distributor's round that long."""
    names = list(sources)
    pipeline = client.pipeline(transaction=True)
    for source in names:
        keys = SourceKeys(source)
        pipeline.hgetall(keys.leases)
        pipeline.zrange(keys.active, 0, -1, withscores=True)
    replies = pipeline.execute()
    found: dict[str, dict[str, str]] = {}
    for index, source in enumerate(names):
        leases, active = replies[2 * index], replies[2 * index + 1]
        deadlines = {text(task_id): score for task_id, score in active}
        queued: dict[str, str] = {}
        for task_id, value in leases.items():
            state, _, token = text(value).partition("|")
            task = text(task_id)
            deadline = deadlines.get(task)
            if state == "q" and deadline is not None and deadline - queued_lease_seconds <= now - older_than:
                queued[task] = token
        if queued:
            found[source] = queued
    return found


class LostMessageProbe:
    """Looks for lost Celery messages every ``lost_message_check_seconds`` (see the module docstring)."""

    def __init__(self, client: redis.Redis, scripts: Scripts, settings: HarvesterSettings) -> None:
        self.client = client
        self.scripts = scripts
        self.check_seconds = settings.lost_message_check_seconds
        self.queued_lease_seconds = settings.queued_lease_seconds
        self._suspects: set[tuple[str, str, str]] = set()  # (source, task id, token) missing at the last look
        self._next_look = time.monotonic() + self.check_seconds

    @property
    def due(self) -> bool:
        return time.monotonic() >= self._next_look

    @redis_storage_errors()
    def look(self, queues: Mapping[str, str]) -> dict[str, int]:
        """One look over ``queues`` (source -> its Celery queue); returns source -> reservations sent back."""
        self._next_look = time.monotonic() + self.check_seconds
        seconds, microseconds = self.client.time()
        now = seconds + microseconds / 1_000_000
        queued = queued_reservations_of(self.client, sorted(queues), self.check_seconds, self.queued_lease_seconds,
                                        now)
        if not queued:
            self._suspects = set()
            return {}
        present = messages_in_flight(self.client, sorted({queues[source] for source in queued}))
        missing = {(source, task_id, token) for source, reserved in queued.items()
                   for task_id, token in reserved.items() if (task_id, token) not in present}
        confirmed = missing & self._suspects
        self._suspects = missing - confirmed
        by_source: dict[str, list[str]] = {}
        for source, task_id, token in sorted(confirmed):
            by_source.setdefault(source, []).extend((task_id, token))
        if not by_source:
            return {}

        def build(pipeline: ScriptPipeline) -> None:
            for source, leases in by_source.items():
                pipeline.call("return_lost", source, leases=leases)

        returned = {source: reply.returned
                    for source, reply in zip(by_source, self.scripts.run_pipeline(build), strict=True)}
        for source, count in returned.items():
            if count:
                log.warning("%s: %d queued tasks whose Celery message is in neither its queue nor kombu's unacked "
                            "set went back to intake, uncharged (a worker died between BRPOP and registering it)",
                            source, count)
        return {source: count for source, count in returned.items() if count}
