"""Dead letters: tasks that failed past their source's retries (or were malformed), with the reason.

Each entry is JSON ``{message, reason, failed_at}``; ``message`` keeps run_id and package_id, so a
producer can tell which tasks of its run were given up (see also :meth:`DeadLetters.dead_for_run`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pydantic
import redis

from harvester.distributor.messages import TaskMessage
from harvester.distributor.scripts import distributor_scripts
from harvester.distributor.store import wake_distributors
from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptPipeline


@dataclass(frozen=True)
class DeadLetter:
    message: dict[str, Any] | str  # the task message, or the raw text of a malformed one
    reason: str
    failed_at: float

    @classmethod
    def from_json(cls, raw: str | bytes) -> DeadLetter:
        entry = json.loads(raw)
        return cls(message=entry["message"], reason=entry["reason"], failed_at=float(entry["failed_at"]))

    def task_message(self) -> TaskMessage | None:
        """The task as a :class:`TaskMessage`, or None when it was malformed."""
        if not isinstance(self.message, dict):
            return None
        try:
            return TaskMessage.model_validate(self.message)
        except pydantic.ValidationError:
            return None


class DeadLetters:
    """List, re-queue and purge the dead letters of a source."""

    def __init__(self, redis_client: redis.Redis) -> None:
        self.redis = redis_client
        self.scripts = distributor_scripts(redis_client)

    @redis_storage_errors()
    def count(self, source: str) -> int:
        return int(self.redis.llen(SourceKeys(source).dead_letters))

    @redis_storage_errors()
    def list(self, source: str, start: int = 0, limit: int = 100) -> list[DeadLetter]:
        """Entries oldest first."""
        raw = self.redis.lrange(SourceKeys(source).dead_letters, start, start + limit - 1)
        return [DeadLetter.from_json(entry) for entry in raw]

    @redis_storage_errors()
    def find(self, source: str, task_id: str, page: int = 1000) -> DeadLetter | None:
        """The newest dead letter of ``task_id`` (read from the tail a page at a time), or None."""
        key = SourceKeys(source).dead_letters
        end = -1
        while True:
            raw = self.redis.lrange(key, end - page + 1, end)
            for entry in reversed(raw):
                letter = DeadLetter.from_json(entry)
                if isinstance(letter.message, dict) and letter.message.get("task_id") == task_id:
                    return letter
            if len(raw) < page:
                return None
            end -= page

    @redis_storage_errors()
    def requeue(self, source: str, limit: int | None = None) -> int:
        """Move entries (oldest first) back to intake with attempt 0; malformed ones stay. Returns how many."""
        def build(pipeline: ScriptPipeline) -> None:
            pipeline.call("requeue_dead", source, limit=-1 if limit is None else int(limit))
            wake_distributors(pipeline.pipeline, source)

        return self.scripts.run_pipeline(build)[0].requeued

    @redis_storage_errors()
    def purge(self, source: str) -> int:
        """Delete every entry; returns how many there were."""
        keys = SourceKeys(source)
        pipeline = self.redis.pipeline(transaction=True)
        pipeline.llen(keys.dead_letters)
        pipeline.delete(keys.dead_letters)
        count, _ = pipeline.execute()
        return int(count)

    @redis_storage_errors()
    def dead_for_run(self, source: str, run_id: str, package_id: int | None = None) -> int:
        """Tasks of one run (or one package of it) now in dead letters."""
        field = run_id if package_id is None else f"{run_id}|{package_id}"
        return int(self.redis.hget(SourceKeys(source).run_dead, field) or 0)

    @redis_storage_errors()
    def end_run(self, source: str, run_id: str) -> int:
        """The run is over (its report was written): drop its per-run dead-letter records, so the hash holds
        only runs in progress. The dead letters themselves stay (capped per source). Returns fields dropped."""
        keys = SourceKeys(source)
        fields = [run_id, *(field for field, _ in self.redis.hscan_iter(keys.run_dead, match=f"{run_id}|*",
                                                                         count=1000))]
        return int(self.redis.hdel(keys.run_dead, *fields))

    @redis_storage_errors()
    def end_runs_before(self, source: str, run_id: str) -> int:
        """``run_id`` has reported: drop the per-run records of the source's other runs (over before it: one
        harvest run at a time per source), keeping this run's, which its report is computed from again when
        its report task is retried or its DAG run cleared. Returns fields dropped."""
        keys = SourceKeys(source)
        fields = [field for field, _ in self.redis.hscan_iter(keys.run_dead, count=1000)
                  if (field.decode() if isinstance(field, bytes) else field).split("|", 1)[0] != run_id]
        return int(self.redis.hdel(keys.run_dead, *fields)) if fields else 0
