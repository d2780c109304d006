"""A chain followed inside its batch: an API whose next request is built from its response (``listing.next``).

A cursor makes an API's pages a chain: each request needs the previous answer, so handing every next request to
intake, admission and Celery costs the chain one such hand-off per page. Instead the batch that fetched a page
sends its next request itself, round after round: the parent's lease passes to the child in ONE atomic call under
admission's own checks (``RateLimitStore.continue_chain``, ``distributor/lua/continue_chain.lua``), so
``max_active``, ``per_minute``, ``per_host_max_active`` and the pauses hold exactly as through intake, and the
child's message becomes its lease's message: a worker killed mid-chain resumes at that page (the checkpoint).

When the limits, a pause or the chain's time budget say no, the next request goes to intake like any discovered
task and the chain goes on there, under the distributor.
"""

from __future__ import annotations

import logging
import time

from harvester.config import SourceConfig
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.errors import StorageError
from harvester.settings import HarvesterSettings
from harvester.workers.report import BatchReport
from harvester.workers.settler import Settler

log = logging.getLogger(__name__)
# A batch follows a chain for at most this many leases of time from its start, then hands the next request to
# intake: the batch stays far inside Celery's time limit (two leases and more,
# harvester.distributor.service.Distributor.batch_time_limit) and other sources get a turn.
CHAIN_BUDGET_LEASES = 0.5
Link = tuple[TaskMessage, TaskMessage]  # (a followed chain page's task, its next request)


class ChainContinuation:
    """Hands each followed chain page's lease to its next request, or its next request to intake."""

    def __init__(self, store: RateLimitStore, settler: Settler, intake: Intake, lease_seconds: float) -> None:
        self.store, self.settler, self.intake = store, settler, intake
        self.budget_seconds = CHAIN_BUDGET_LEASES * lease_seconds

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, store: RateLimitStore, settler: Settler,
                      intake: Intake) -> ChainContinuation:
        return cls(store, settler, intake, settings.lease_seconds)

    def deadline(self, source: SourceConfig) -> float | None:
        """Until when (monotonic) a batch of ``source`` starting now keeps a chain's next requests for itself;
        None when it never does: browser sources (a page slot's visit is not a request) and sources without
        ``listing.next``."""
        if source.render != "http" or source.listing is None or source.listing.next is None:
            return None
        return time.monotonic() + self.budget_seconds

    def continue_all(self, source: SourceConfig, chain: list[Link], report: BatchReport,
                     until: float | None) -> list[TaskMessage]:
        """Each followed chain page's package counted down, then its lease handed to its next request in one
        atomic call under admission's checks: the next requests this batch now holds, to send itself. A next
        request the limits, a pause or the time budget refuse is pushed to intake and its parent released, as any
        discovered task; if that fails too the parent's lease expires and its retry finds the same next request
        again. No page is lost: the child's message is its lease's (the checkpoint)."""
        if not chain:
            return []
        counted = {id(message) for message in self.settler.count_down(source, [parent for parent, _ in chain], report)}
        continuing: list[TaskMessage] = []
        for parent, child in chain:
            if id(parent) not in counted:  # its count-down failed: handed back, its retry finds the child again
                continue
            try:
                if until is not None and time.monotonic() < until:
                    step = self.store.continue_chain(parent, child)
                    if step.token is not None:
                        continuing.append(child.model_copy(update={"lease_token": step.token}))
                        report.outcomes["chain_continued"] += 1
                        continue
                    report.outcomes[f"chain_handed_on:{step.status}"] += 1
                else:
                    report.outcomes["chain_handed_on:time_budget"] += 1
                self.intake.push(source.name, [child])
                self.store.release(source.name, {parent.task_id: str(parent.lease_token)})
            except StorageError as error:  # Redis away: the parent's lease expires and its retry comes back here
                log.warning("%s: handing on the next request of %s failed: %s", source.name, parent.url, error)
        return continuing
