"""The failure policy: how a task that did not end in a stored record ends instead.

:meth:`FailurePolicy.decide` is pure (a fetch result in, a :class:`FailureDecision` out) so each rule
has a unit test; :meth:`FailurePolicy.fetch_failed`, :meth:`retry` and :meth:`dead_letter` apply it
through :class:`~harvester.distributor.dead_tasks.DeadLettering`. Retries are counted against the
source's ``retries`` and delayed with backoff (or the server's Retry-After) atomically by
``RateLimitStore.fail``; a dead task is counted down in its package as failed. Nothing here raises for a
Redis or MongoDB fault: a task whose ending could not be recorded keeps its lease until the reaper retries it.

Within :meth:`FailurePolicy.deferred` (a batch's settle step) the endings and pauses are queued and recorded
together when it ends: one round trip and one count-down per run for the whole batch, where a batch of pages
a site refused made one to three round trips and a count-down per page.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from harvester.config import SourceConfig
from harvester.distributor import DeadLettering, RateLimitStore, TaskEnding, TaskMessage, host_of
from harvester.errors import StorageError
from harvester.scraping import DEFAULT_CLASSIFIER, RETRY_VERDICTS, FetchResult, ResponseClassifier, Verdict
from harvester.settings import HarvesterSettings
from harvester.workers.report import BatchReport

if TYPE_CHECKING:
    from harvester.storage import PackageStore
    from harvester.workers.clients import WorkerClients

log = logging.getLogger(__name__)
DEFAULT_RETRY_AFTER_SECONDS = 30.0
DEFAULT_MAX_RETRY_AFTER_SECONDS = 3600.0
PROXY_ERROR = "proxy_error"  # every proxy of the pool failed: the proxies' failure, never charged to the site


def single_host(source: SourceConfig) -> bool:
    """Whether all of a source's input is on one host (seeds only, one host): then a pause of that host
    is a pause of the whole source, and admission skips the source at once instead of task by task."""
    return source.input.mongo is None and len({host_of(seed) for seed in source.input.seeds}) == 1


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


@dataclass
class _Endings:
    """Endings and pauses queued by :meth:`FailurePolicy.deferred`, with the report each one counts in."""

    endings: list[tuple[TaskEnding, BatchReport]] = field(default_factory=list)
    pauses: list[tuple[str, str, float]] = field(default_factory=list)  # (source, host or "" for all, seconds)


class FailurePolicy:
    """Retry with backoff, dead letter, or pause the source and host (DESIGN.md section 9)."""

    def __init__(self, store: RateLimitStore, packages: Callable[[], PackageStore],
                 classifier: ResponseClassifier = DEFAULT_CLASSIFIER,
                 default_retry_after: float = DEFAULT_RETRY_AFTER_SECONDS,
                 max_retry_after: float = DEFAULT_MAX_RETRY_AFTER_SECONDS) -> None:
        self.store = store
        self.dead_lettering = DeadLettering(store, packages)
        self.classifier = classifier
        self.default_retry_after = default_retry_after
        self.max_retry_after = max_retry_after
        self._queued = threading.local()  # this thread's _Endings inside deferred(), else none

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, clients: WorkerClients) -> FailurePolicy:
        return cls(clients.store, lambda: clients.packages, max_retry_after=settings.max_retry_after_seconds)

    def longest_wait(self, source: SourceConfig | None) -> float:
        """The longest pause a server may ask of ``source``: the setting, or the source's own, if lower."""
        if source is not None and source.max_retry_after is not None:
            return min(self.max_retry_after, source.max_retry_after)
        return self.max_retry_after

    # -- deciding ------------------------------------------------------------------------------
    def decide(self, fetch: FetchResult, source: SourceConfig | None = None) -> FailureDecision:
        """A failed fetch → its ending. A rate limit (429, 503, or a block naming Retry-After) pauses
        the answering host for Retry-After, or ``default_retry_after`` when the server named none (or
        an unbelievable value: ``parse_retry_after`` refuses those), never longer than :meth:`longest_wait`."""
        reason = f"{fetch.counter}: {fetch.reason}" if fetch.reason else fetch.counter
        verdict = self.classifier.verdict(fetch.outcome, fetch.status, fetch.retry_after)
        if verdict not in RETRY_VERDICTS:
            return FailureDecision(FailureAction.DEAD_LETTER, reason)
        longest = self.longest_wait(source)
        if verdict is Verdict.RATE_LIMITED:
            wait = fetch.retry_after if fetch.retry_after is not None else self.default_retry_after
            wait = min(wait, longest)
            return FailureDecision(FailureAction.RETRY, reason, retry_after=wait, pause_seconds=wait)
        retry_after = None if fetch.retry_after is None else min(fetch.retry_after, longest)
        return FailureDecision(FailureAction.RETRY, reason, retry_after=retry_after)

    # -- applying ------------------------------------------------------------------------------
    def fetch_failed(self, source: SourceConfig | str, message: TaskMessage, fetch: FetchResult,
                     report: BatchReport) -> FailureDecision:
        """Decide and apply the ending of a failed fetch. A rate limit pauses the host that answered
        (after redirects); the whole source pauses too only when all its input is on that one host."""
        config = source if isinstance(source, SourceConfig) else None
        source_name = source.name if isinstance(source, SourceConfig) else source
        if fetch.outcome == PROXY_ERROR:
            return self._proxy_failed(message, fetch, report)
        decision = self.decide(fetch, config)
        if decision.action is FailureAction.RETRY and message.request is not None and \
                not message.request.repeatable_after(fetch.outcome, fetch.status):
            decision = FailureDecision(FailureAction.DEAD_LETTER, f"{decision.reason} (not retried: the request is "
                                                                  "not safe_to_repeat)")
        if decision.action is FailureAction.DEAD_LETTER:
            self.dead_letter(message, decision.reason, report)
            return decision
        pauses: list[tuple[str, str, float]] = []
        if decision.pause_seconds is not None:
            # the host that answered (after redirects) and the one the task names, which admission knows tasks
            # by; the whole source too when all its input is on that one host. Sent with the retry.
            answering = host_of(fetch.final_url or message.url) or host_of(message.url)
            pauses.append((source_name, answering, decision.pause_seconds))
            if answering != host_of(message.url):
                pauses.append((source_name, host_of(message.url), decision.pause_seconds))
            if config is None or single_host(config):
                pauses.append((source_name, "", decision.pause_seconds))
        self._queue([(TaskEnding.failure(message, decision.reason, decision.retry_after), report)], pauses)
        return decision

    def _proxy_failed(self, message: TaskMessage, fetch: FetchResult, report: BatchReport) -> FailureDecision:
        """Every proxy of the country's pool failed the page: our way out failed, not the site. The task comes back
        after the usual backoff with the same attempt (no retry of the site's spent, never dead-lettered for it, so
        never in the run's dead share), no host paused; its next try takes the pool's proxies in the order their
        shared health gives, so a proxy that came back (or another one) carries it."""
        reason = f"{fetch.counter}: {fetch.reason}" if fetch.reason else fetch.counter
        report.outcomes["proxy_error_deferred"] += 1
        self._queue([(replace(TaskEnding.failure(message, reason), keep_attempt=True), report)])
        return FailureDecision(FailureAction.RETRY, reason)

    def pause_hosts(self, source: SourceConfig, hosts: list[str], seconds: float) -> None:
        """Pause ``hosts`` of ``source`` at admission for every worker (repeated blocks); the whole source too when
        all its input is on one of them. Recorded with the batch's endings."""
        pauses = [(source.name, host, seconds) for host in hosts]
        if single_host(source):
            pauses.append((source.name, "", seconds))
        self._queue(pauses=pauses)

    def retry(self, message: TaskMessage, reason: str, retry_after: float | None, report: BatchReport,
              counter: str | None = None) -> None:
        """Hand the task back for a later attempt; past the source's retries the store dead-letters it."""
        if counter:
            report.outcomes[counter] += 1
        self._queue([(TaskEnding.failure(message, reason, retry_after), report)])

    def defer(self, message: TaskMessage, reason: str, seconds: float, report: BatchReport) -> None:
        """Hand the task back for after ``seconds`` without spending a retry, and pause its host as long: the host
        could not be reached and its breaker is open (:mod:`harvester.workers.host_breaker`)."""
        report.outcomes["deferred_host_unreachable"] += 1
        self._queue([(TaskEnding.deferral(message, reason, seconds), report)])

    def dead_letter(self, message: TaskMessage, reason: str, report: BatchReport) -> None:
        """A failure retrying cannot fix (404, not HTML, redirect loop, rejected record)."""
        self._queue([(TaskEnding.rejection(message.source, message.to_json(), reason, message.lease_token), report)])

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Queue this thread's endings and pauses, and record them together when the block ends (see the module
        docstring); nested, the outer block records them."""
        if getattr(self._queued, "endings", None) is not None:
            yield
            return
        queued = self._queued.endings = _Endings()
        try:
            yield
        finally:
            self._queued.endings = None
            self._record(queued)

    def _queue(self, endings: Sequence[tuple[TaskEnding, BatchReport]] = (),
               pauses: Sequence[tuple[str, str, float]] = ()) -> None:
        queued = getattr(self._queued, "endings", None)
        if queued is None:
            self._record(_Endings(list(endings), list(pauses)))
        else:
            queued.endings += endings
            queued.pauses += pauses

    def _record(self, queued: _Endings) -> None:
        if not queued.endings and not queued.pauses:
            return
        try:
            outcomes = self.dead_lettering.end([ending for ending, _ in queued.endings], queued.pauses)
        except StorageError:
            log.exception("could not hand %d tasks back; their leases will expire and the reaper retries them",
                          len(queued.endings))
            return
        for (ending, report), outcome in zip(queued.endings, outcomes, strict=True):
            if outcome == "dead":
                report.dead += 1
            elif ending.message is not None:  # a retry (or a stale holder's, which the store counted stale)
                report.retried += 1
