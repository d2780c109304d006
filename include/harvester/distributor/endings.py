"""How a task ends when it does not succeed: the retry backoff, and one ending (retry, deferral, rejection) as
:meth:`harvester.distributor.store.RateLimitStore.end_tasks` records it. Apart from the store, which is the
atomic calls; these are the values a worker or the page slots build before calling it."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from harvester.distributor.messages import TaskMessage
from harvester.settings import HarvesterSettings

__all__ = ["RetryPolicy", "TaskEnding"]


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with a little jitter, capped; a server's Retry-After wins."""

    base_seconds: float = 2.0
    max_seconds: float = 300.0
    jitter: float = 0.1

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> RetryPolicy:
        return cls(settings.retry_base_seconds, settings.retry_max_seconds)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before attempt ``attempt + 1`` may run (``attempt`` is the one that just failed)."""
        if retry_after is not None:
            return max(0.0, float(retry_after))
        backoff = self.base_seconds * (2 ** min(attempt, 30))
        return min(self.max_seconds, backoff * (1 + random.uniform(0, self.jitter)))


@dataclass(frozen=True)
class TaskEnding:
    """One task handed back: retried after backoff (dead past its source's retries) when it has ``message``,
    else (a rejection) dead at once, whatever its retries. Only the holder of ``token`` acts."""

    source: str
    task_id: str
    original: str  # the message as dead letters keep it (JSON, without the lease token)
    reason: str
    message: TaskMessage | None = None
    retry_after: float | None = None
    token: str | None = None
    keep_attempt: bool = False  # deferred (its host's breaker is open): no retry spent, due after the pause

    @classmethod
    def failure(cls, message: TaskMessage, reason: str, retry_after: float | None = None) -> TaskEnding:
        return cls(message.source, message.task_id, message.to_json(), reason, message, retry_after,
                   message.lease_token)

    @classmethod
    def deferral(cls, message: TaskMessage, reason: str, seconds: float) -> TaskEnding:
        """Back after ``seconds`` with the same attempt: its host was found unreachable, not the task wrong
        (harvester.workers.host_breaker); the host is paused as long (``fail.lua`` pauses it with the retry)."""
        return cls(message.source, message.task_id, message.to_json(), reason, message, seconds, message.lease_token,
                   keep_attempt=True)

    @classmethod
    def rejection(cls, source: str, raw_message: str, reason: str, token: str | None = None) -> TaskEnding:
        """``raw_message`` as admitted; its ``lease_token`` (delivery metadata) is the token unless one is given."""
        parsed = json.loads(raw_message)
        if "lease_token" in parsed:  # not part of the task: keep it out of dead letters
            token = str(parsed.pop("lease_token")) if token is None else token
            raw_message = json.dumps(parsed, separators=(",", ":"))
        return cls(source, str(parsed.get("task_id", "")), raw_message, reason, token=token)
