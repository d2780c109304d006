"""The failure policy: how a task that did not end in a stored record ends instead.

:meth:`FailurePolicy.decide` is pure (a fetch result in, a :class:`FailureDecision` out) so each rule
has a unit test; :meth:`FailurePolicy.fetch_failed`, :meth:`retry` and :meth:`dead_letter` apply it
through the rate-limit store. Retries are counted against the source's ``retries`` and delayed with
backoff (or the server's Retry-After) atomically by ``RateLimitStore.fail``; a dead task is counted
down in its package as failed. Nothing here raises for a Redis or MongoDB fault: a task whose ending
could not be recorded keeps its lease until the reaper retries it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import redis

from harvester.distributor import RateLimitStore, TaskMessage
from harvester.distributor.hosts import host_of
from harvester.scraping.page_fetcher import FetchResult
from harvester.scraping.responses import DEFAULT_CLASSIFIER, RETRY_VERDICTS, ResponseClassifier, Verdict
from harvester.settings import HarvesterSettings
from harvester.workers.report import BatchReport

if TYPE_CHECKING:
    from harvester.storage.packages import PackageStore
    from harvester.workers.clients import WorkerClients

log = logging.getLogger(__name__)
DEFAULT_RETRY_AFTER_SECONDS = 30.0


class FailureAction(StrEnum):
    RETRY = "retry"  # back to the source's delayed set, until its retries are spent
    DEAD_LETTER = "dead_letter"  # at once: retrying cannot help


@dataclass(frozen=True, slots=True)
class FailureDecision:
    """How one failed fetch ends: the action, the reason recorded with it, the delay the server
    asked for, and how long the whole source and the page's host pause (None: no pause)."""

    action: FailureAction
    reason: str
    retry_after: float | None = None
    pause_seconds: float | None = None


class FailurePolicy:
    """Retry with backoff, dead letter, or pause the source and host (DESIGN.md section 9)."""

    def __init__(self, store: RateLimitStore, packages: Callable[[], PackageStore],
                 classifier: ResponseClassifier = DEFAULT_CLASSIFIER,
                 default_retry_after: float = DEFAULT_RETRY_AFTER_SECONDS) -> None:
        self.store = store
        self.packages = packages
        self.classifier = classifier
        self.default_retry_after = default_retry_after

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, clients: WorkerClients) -> FailurePolicy:
        return cls(clients.store, lambda: clients.packages)

    # -- deciding ------------------------------------------------------------------------------
    def decide(self, fetch: FetchResult) -> FailureDecision:
        """A failed fetch → its ending. A rate limit (429, 503, or a block naming Retry-After) pauses
        the whole source and host for Retry-After, or ``default_retry_after`` when the server named none."""
        reason = f"{fetch.counter}: {fetch.reason}" if fetch.reason else fetch.counter
        verdict = self.classifier.verdict(fetch.outcome, fetch.status, fetch.retry_after)
        if verdict not in RETRY_VERDICTS:
            return FailureDecision(FailureAction.DEAD_LETTER, reason)
        if verdict is Verdict.RATE_LIMITED:
            wait = fetch.retry_after if fetch.retry_after is not None else self.default_retry_after
            return FailureDecision(FailureAction.RETRY, reason, retry_after=wait, pause_seconds=wait)
        return FailureDecision(FailureAction.RETRY, reason, retry_after=fetch.retry_after)

    # -- applying ------------------------------------------------------------------------------
    def fetch_failed(self, source_name: str, message: TaskMessage, fetch: FetchResult,
                     report: BatchReport) -> FailureDecision:
        """Decide and apply the ending of a failed fetch."""
        decision = self.decide(fetch)
        if decision.action is FailureAction.DEAD_LETTER:
            self.dead_letter(message, decision.reason, report)
            return decision
        if decision.pause_seconds is not None:
            try:  # the whole source waits, not just this task (DESIGN.md section 9)
                self.store.pause_source(source_name, decision.pause_seconds)
                self.store.pause_host(source_name, host_of(message.url), decision.pause_seconds)
            except redis.RedisError as error:
                log.warning("pausing %s failed: %s", source_name, error)
        self.retry(message, decision.reason, decision.retry_after, report)
        return decision

    def retry(self, message: TaskMessage, reason: str, retry_after: float | None, report: BatchReport,
              counter: str | None = None) -> None:
        """Hand the task back for a later attempt; past the source's retries the store dead-letters it."""
        if counter:
            report.outcomes[counter] += 1
        try:
            dead = self.store.fail(message, reason, retry_after)
        except redis.RedisError:
            log.exception("could not hand task %s back; its lease will expire and the reaper retries it",
                          message.task_id)
            return
        if dead:
            report.dead += 1
            self._count_down_failed(message)
        else:
            report.retried += 1

    def dead_letter(self, message: TaskMessage, reason: str, report: BatchReport) -> None:
        """A failure retrying cannot fix (404, not HTML, redirect loop, rejected record)."""
        try:
            self.store.reject(message.source, message.to_json(), reason)
        except redis.RedisError:
            log.exception("could not dead-letter task %s", message.task_id)
            return
        report.dead += 1
        self._count_down_failed(message)

    def _count_down_failed(self, message: TaskMessage) -> None:
        if message.run_id is None or message.package_id is None:
            return
        try:
            self.packages().complete_tasks(message.source, message.run_id, message.package_id, [message.task_id],
                                           failed=True)
        except Exception:
            log.exception("could not count dead task %s down in its package", message.task_id)
