"""A task that ends dead: dead-lettered in Redis, then counted down as failed in its package.

Every path that gives a task up goes through :class:`DeadLettering`: a failure past the source's
retries (``fail``), a failure retrying cannot fix (``reject``), a batch that killed its worker twice
(``worker_lost``). Each dead-letters the task with one atomic script call, then counts it down with
:func:`count_down_dead`, the one count-down of dead tasks. A count-down that does not happen (MongoDB
down, a process killed between the two writes, a lease the reaper dead-lettered) is not lost: the dead
letter keeps the task's run and package, and the run's settle step (``harvester.producer.progress``)
finds it with :func:`dead_tasks_of_run` and counts it down through the same function.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from harvester.distributor.endings import TaskEnding
from harvester.distributor.messages import TaskMessage
from harvester.distributor.store import Leases, RateLimitStore, WorkerLostResult
from harvester.errors import HarvesterError, redis_storage_errors
from harvester.redis_keys import SourceKeys

__all__ = ["DeadLettering", "DeadTasks", "PackageCountDown", "count_down_dead", "dead_tasks_of_run"]

log = logging.getLogger(__name__)
DEAD_PAGE = 5000  # dead-letter entries read per LRANGE while scanning for one run's tasks


class PackageCountDown(Protocol):
    """What counting dead tasks down needs of the package store (:class:`harvester.storage.PackageStore`)."""

    def settle_dead(self, source: str, run_id: str, dead_by_package: dict[int, set[str]]) -> int: ...


@dataclass
class DeadTasks:
    """Dead-lettered tasks of one run: ids by package, and how many per reason."""

    by_package: dict[int, set[str]] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, message: Mapping[str, Any], reason: str) -> None:
        self.reasons[reason.split(":", 1)[0].strip() or "unknown"] += 1
        if message.get("package_id") is not None and message.get("task_id"):
            self.by_package.setdefault(int(message["package_id"]), set()).add(str(message["task_id"]))


def count_down_dead(packages: PackageCountDown, source: str, dead_by_run: Mapping[str, DeadTasks]) -> int:
    """Count dead tasks down in their packages as failed (one bulk write per run; a task already
    settled costs a read, no write). Returns the packages touched. Raises :class:`StorageError`."""
    return sum(packages.settle_dead(source, run_id, dead.by_package)
               for run_id, dead in dead_by_run.items() if dead.by_package)


def dead_tasks_in(messages: Iterable[Mapping[str, Any] | TaskMessage], reason: str = "") -> dict[str, DeadTasks]:
    """The given dead tasks grouped by run (tasks of no run are counted down nowhere)."""
    by_run: dict[str, DeadTasks] = {}
    for message in messages:
        fields = message.model_dump() if isinstance(message, TaskMessage) else message
        if isinstance(fields, Mapping) and isinstance(fields.get("run_id"), str):
            by_run.setdefault(fields["run_id"], DeadTasks()).add(fields, reason)
    return by_run


@redis_storage_errors()
def dead_tasks_of_run(client: redis.Redis, source: str, run_id: str) -> DeadTasks:
    """Scan the source's dead letters (entries ``{message, reason, failed_at}``) for this run's tasks.

    The list moves while it is read in pages: the distributor appends at the tail and drops the oldest
    at the head (past the cap, or a re-queue). So the pages are read from the tail with negative indexes,
    which a head pop never changes: an entry present for the whole scan can only move deeper, towards
    the pages still to come, so none is missed; one seen twice (the tail grew between pages) is
    counted once."""
    keys = SourceKeys(source)
    dead = DeadTasks()
    if not int(client.hget(keys.run_dead, run_id) or 0):
        return dead  # the scripts count dead tasks per run: nothing to scan
    seen: set[bytes | str] = set()
    end = -1
    while page := client.lrange(keys.dead_letters, end - DEAD_PAGE + 1, end):
        for raw in page:
            if raw in seen:
                continue
            try:
                entry = json.loads(raw)
                message = entry["message"]
                if isinstance(message, str):
                    message = json.loads(message)
            except (ValueError, KeyError, TypeError):
                continue
            if not isinstance(message, dict) or message.get("run_id") != run_id:
                continue
            seen.add(raw)
            dead.add(message, str(entry.get("reason") or "unknown"))
        if len(page) < DEAD_PAGE:
            break  # this page reached the head
        end -= DEAD_PAGE
    return dead


class DeadLettering:
    """The one way a task ends dead: dead-lettered, then counted down as failed in its package.

    Redis faults propagate (the task keeps its lease; the reaper retries it); a count-down that fails
    is logged and left to the run's settle step, which finds the dead letter.
    """

    def __init__(self, store: RateLimitStore, packages: Callable[[], PackageCountDown]) -> None:
        self.store = store
        self.packages = packages

    def fail(self, message: TaskMessage, reason: str, retry_after: float | None = None) -> bool:
        """Hand a failed task back for another attempt; past its source's retries it is dead (True)."""
        return self.end([TaskEnding.failure(message, reason, retry_after)])[0] == "dead"

    def reject(self, source: str, message: TaskMessage | str, reason: str, token: str | None = None) -> bool:
        """Dead-letter an admitted task at once, whatever its retries; False when its lease was no longer held
        (under ``token``, default the message's own)."""
        raw = message.to_json() if isinstance(message, TaskMessage) else message
        if isinstance(message, TaskMessage) and token is None:
            token = message.lease_token
        return self.end([TaskEnding.rejection(source, raw, reason, token)])[0] == "dead"

    def end(self, endings: list[TaskEnding], pauses: Iterable[tuple[str, str, float]] = ()) -> list[str]:
        """Many endings (and Retry-After pauses) in one round trip (:meth:`RateLimitStore.end_tasks`), then the
        dead ones counted down: one bulk write per run. Each ending's outcome: retry, dead or no_lease."""
        outcomes = self.store.end_tasks(endings, pauses)
        dead: dict[str, list[Mapping[str, Any] | TaskMessage]] = {}
        for ending, outcome in zip(endings, outcomes, strict=True):
            if outcome == "dead":
                dead.setdefault(ending.source, []).append(
                    ending.message if ending.message is not None else json.loads(ending.original))
        for source, messages in dead.items():
            self.count_down(source, messages)
        return outcomes

    def worker_lost(self, source: str, leases: Leases) -> WorkerLostResult:
        """A batch's pool process died: its tasks go back through admission, or (a batch that killed its
        worker twice) are dead and counted down."""
        result = self.store.worker_lost(source, leases)
        self.count_down(source, [json.loads(entry).get("message", {}) for entry in result.dead_entries])
        return result

    def count_down(self, source: str, messages: Iterable[Mapping[str, Any] | TaskMessage]) -> None:
        """Count dead tasks down in their packages; a failure is logged (the settle step finds them)."""
        by_run = dead_tasks_in(messages)
        if not by_run:
            return
        try:
            count_down_dead(self.packages(), source, by_run)
        except HarvesterError as error:  # MongoDB unreachable or not configured: the dead letter keeps the task
            log.warning("%s: could not count dead tasks of runs %s down in their packages (%s); the run's settle "
                        "step counts them down from the dead letters", source, ", ".join(sorted(by_run)), error)
