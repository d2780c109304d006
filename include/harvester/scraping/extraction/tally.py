"""What extraction gave in one batch (or a re-extraction), per run: the figures the run's quality and drift check
are over.

Counted where it happens: every record extracted (a detail page or a listing item), stored or
rejected; per attribute how many of those had a value (``seen:`` and ``present:``), so a selector that
stops matching a required field lowers its share although the record was never stored; each rejection
by attribute and rule (``rejected:<rule>:<attribute>``) and each value an optional attribute's problem
dropped (``problem:<rule>:<attribute>``). A batch sends them to the run's figures in Redis with its
outcome counters (one round trip), a re-extraction with its own; the run's report reads them. Here, below both,
so that a harvest and a re-extraction count the same figures.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from harvester.scraping.extraction.extractor import Extraction

RECORDS_EXTRACTED = "records_extracted"
RECORDS_REJECTED = "records_rejected"


class ExtractionTally:
    """Per run id: the figures of the records this batch extracted."""

    def __init__(self) -> None:
        self.by_run: dict[str | None, Counter[str]] = defaultdict(Counter)

    def add(self, run_id: str | None, extraction: Extraction) -> Counter[str]:
        """Count one extracted record; returns the outcome counters of its rejection (empty when stored)."""
        figures = self.by_run[run_id]
        figures[RECORDS_EXTRACTED] += 1
        for attribute in extraction.values:
            if attribute == "url":
                continue
            figures[f"seen:{attribute}"] += 1
            if extraction.has_value(attribute):
                figures[f"present:{attribute}"] += 1
        rejected: Counter[str] = Counter()
        if extraction.record is None:
            figures[RECORDS_REJECTED] += 1
            for problem in extraction.rejections:
                rejected[f"rejected:{problem.kind}:{problem.attribute}"] += 1
        for problem in extraction.problems:
            if not problem.required:
                figures[f"problem:{problem.kind}:{problem.attribute}"] += 1
        figures.update(rejected)
        return rejected
