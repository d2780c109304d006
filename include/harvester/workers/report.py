"""What a batch did: the counts the Celery task returns and the outcome counters it adds to Redis."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harvester.scraping import ExtractionTally

if TYPE_CHECKING:
    from harvester.scraping import PageResult

log = logging.getLogger(__name__)


@dataclass
class BatchReport:
    """What a batch did, returned by the Celery task (and logged)."""

    source: str
    tasks: int = 0
    stored: int = 0
    retried: int = 0
    dead: int = 0
    discovered: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    extracted: ExtractionTally = field(default_factory=ExtractionTally)  # per run: what the quality is over
    blocked_by_run: Counter[str] = field(default_factory=Counter)  # block pages per run id: the run report's figure

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "tasks": self.tasks, "stored": self.stored, "retried": self.retried,
                "dead": self.dead, "discovered": self.discovered, "outcomes": dict(self.outcomes)}

    def merge(self, other: BatchReport) -> None:
        """Add ``other``'s counts (a later round of the same batch: a chain followed in it)."""
        self.tasks += other.tasks
        self.stored += other.stored
        self.retried += other.retried
        self.dead += other.dead
        self.discovered += other.discovered
        self.outcomes.update(other.outcomes)


def count_listing_records(page: PageResult, report: BatchReport, run_id: str | None = None) -> bool:
    """Count a listing page's records and their problems; True when it has records to store. An item
    a ``required`` attribute rejects is counted (``rejected``), never the page's other records."""
    listing = page.listing_records
    assert listing is not None
    if listing.problem is not None:
        report.outcomes[listing.problem.counter] += 1
    for extraction in listing.extractions:
        for problem in extraction.problems:
            report.outcomes[problem.counter] += 1
        report.outcomes.update(report.extracted.add(run_id, extraction))
    rejected = listing.rejected
    if rejected:
        report.outcomes["rejected"] += len(rejected)
        log.info("%s: %d of %d items rejected: %s", page.url, len(rejected), len(listing.extractions),
                 rejected[0].rejected_reason)
    if listing.items > len(listing.extractions):
        report.outcomes["listing_items_not_read"] += listing.items - len(listing.extractions)
    return bool(listing.records)
