"""What a batch did: the counts the Celery task returns and the outcome counters it adds to Redis."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harvester.workers.extraction_tally import ExtractionTally


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
