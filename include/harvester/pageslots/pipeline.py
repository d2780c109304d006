"""What a page slot needs of the worker's pipeline: the typed interface it calls (the worker implements it).

A slot renders; the pipeline owns everything else a task is: its source's config, the rate tokens each
request of the page takes as the site sees them (``per_minute`` and the per-host rate), and the settle path
every page ends by (extract, one ``bulk_write``, follow links, count the package down, release). The slot host
is given one :class:`SlotPipeline` (``harvester.workers.slot_pipeline.WorkerSlotPipeline`` in a Celery slot
host) and never reaches into the worker's internals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.scraping import FetchResult, RequestCharger


class SettledTask(Protocol):
    """How the settle path ended a task: stored, retried or dead-lettered (and the counters it added)."""

    @property
    def stored(self) -> int: ...

    @property
    def retried(self) -> int: ...

    @property
    def dead(self) -> int: ...


class SlotPipeline(Protocol):
    """The pipeline as a slot sees it."""

    def source(self, name: str) -> SourceConfig:
        """The source's registered config; raises :class:`~harvester.errors.HarvesterError` when it cannot be read
        (not registered, a registration this version cannot validate, Redis away): the slot hands the task back."""
        ...

    def hand_back(self, message: TaskMessage, reason: str) -> None:
        """A started task the slot cannot run (its source's registration unreadable): back for a later attempt,
        or past its retries dead-lettered and counted down in its package, the way every task ends dead
        (``harvester.distributor.DeadLettering``); counted ``config_error``, as the HTTP path counts it."""
        ...

    def charger(self, source: SourceConfig) -> RequestCharger:
        """Takes the tokens of each request a page sends to its site, right before it starts."""
        ...

    def settle(self, source: SourceConfig, message: TaskMessage, fetch: FetchResult,
               outcomes: Mapping[str, int]) -> SettledTask:
        """Extract, store, follow, count down and release one rendered page (``outcomes``: the render's
        ``browser_*`` counters); runs in a thread, off the slot's event loop."""
        ...
