"""Re-extraction: the source's current config over what the archive kept, with no request to the site.

When a site changes its markup, the drift alert fires, the YAML is fixed, and the records stored meanwhile
are wrong or missing a field. ``harvester reextract SOURCE --since 7d`` (or the ``reextract_since`` param of the
source's DAG) reads the latest archived response of each URL of the window (:mod:`harvester.storage.archive_index`),
extracts it with today's config, and upserts the records exactly as a harvest does (changes, history, the config
version), as a run of its own (``reextract-<time>``) with its own report and quality outcome. Listing pages are
read too: the links they give again are followed inside the archive only (their latest archived response, however
old), never fetched. Nothing here holds an HTTP client.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from harvester.config import Quality, SourceConfig
from harvester.errors import ArchiveUnavailable
from harvester.producer.reextraction_pages import (
    POOL_FROM_PAGES,
    ArchivedPageWork,
    PageReaders,
    ReadPage,
    pool_processes,
)
from harvester.settings import HarvesterSettings
from harvester.storage import (
    DATA_RESPONSE_KIND,
    ArchiveIndex,
    ArchiveReader,
    DataHandler,
    RunFigures,
    RunStore,
)

log = logging.getLogger(__name__)

WRITE_EVERY = 500  # records per bulk write, as a batch of a harvest would be
READ_EVERY = 200  # index rows read at once: one read per WARC file for all of them, one index query for their links
REEXTRACT_RUN_PREFIX = "reextract-"


@dataclass
class ReextractionTally:
    """What a re-extraction read and wrote: the run's figures (as a harvest's) and its outcome counters."""

    run_id: str
    outcomes: Counter[str] = field(default_factory=Counter)
    figures: Counter[str] = field(default_factory=Counter)  # the run's quality figures (records extracted...)
    reader_processes: int = 1  # the processes its pages were read in (reextract_processes; 1: its own)


class Reextraction:
    """Runs one re-extraction of one source over its archive."""

    def __init__(self, settings: HarvesterSettings, index: ArchiveIndex, data: DataHandler, runs: RunStore,
                 figures: RunFigures | None = None) -> None:
        self.settings = settings
        self.index = index
        self.data = data
        self.runs = runs
        self.figures = figures
        self.reader = ArchiveReader()
        self.pool_from_pages = POOL_FROM_PAGES  # a smaller window is read in this process (see reextraction_pages)

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> Reextraction:
        from harvester.connections import MONGO_DEFAULT, REDIS_DEFAULT, mongo_client, redis_client

        database = mongo_client(MONGO_DEFAULT, settings=settings)[settings.mongo_database]
        return cls(settings, ArchiveIndex(database), DataHandler(settings), RunStore(database),
                   RunFigures(redis_client(REDIS_DEFAULT, settings=settings)))

    def run(self, source: SourceConfig, archived_run: str | None = None, since: timedelta | None = None,
            now: datetime | None = None) -> dict[str, Any]:
        """Re-extract the window (an archived run, or the archive since ``now - since``; everything when neither)
        and store the records; the run's report. Pages are read in ``reextract_processes`` processes
        (:mod:`harvester.producer.reextraction_pages`) while this one reads the next chunk's records, writes and
        follows links; two chunks at most are in flight."""
        now = now or datetime.now(UTC)
        tally = ReextractionTally(f"{REEXTRACT_RUN_PREFIX}{now.strftime('%Y%m%dT%H%M%S%f')}")
        self.runs.start(source.name, tally.run_id, now)
        rows = [row for row in self.index.latest(source.name, archived_run, now - since if since is not None else None)
                if row.get("kind") != DATA_RESPONSE_KIND]  # a browser page's JSON: data a page read, not a page
        queue: deque[dict[str, Any]] = deque(rows)
        seen = {row["url"] for row in rows}
        pending: list[dict[str, Any]] = []
        gone: dict[str, str] = {}  # record URL -> why its page says the item is gone
        if len(rows) >= self.pool_from_pages:
            tally.reader_processes = pool_processes(self.settings.reextract_processes)
        in_flight: deque[Callable[[], list[ReadPage]]] = deque()
        try:
            with PageReaders(source, self.settings, tally.reader_processes) as readers:
                while queue or in_flight:
                    if queue and len(in_flight) < 2:
                        chunk = [queue.popleft() for _ in range(min(READ_EVERY, len(queue)))]
                        in_flight.append(readers.start(self._archived_pages(source, chunk, tally)))
                        continue
                    links: list[str] = []
                    not_the_page: dict[str, datetime] = {}
                    for page in in_flight.popleft()():
                        tally.outcomes.update(page.outcomes)
                        tally.figures.update(page.figures)
                        pending.extend(page.records)
                        if page.gone is not None:
                            gone[page.gone[0]] = page.gone[1]
                        if page.not_the_page is not None:
                            not_the_page[page.not_the_page[0]] = page.not_the_page[1]
                        for url in page.links:
                            if url not in seen:
                                seen.add(url)
                                links.append(url)
                        if len(pending) >= WRITE_EVERY:
                            self._write(source, pending, tally)
                            pending = []
                    self._read_earlier(source, not_the_page, queue, tally)
                    self._follow_in_archive(source, links, queue, tally)
            if readers.lost:
                tally.outcomes["page_reader_lost"] += 1
            self._write(source, pending, tally)
            self._mark_gone(source, gone, tally)
        finally:
            self.reader.close()
        return self._report(source, tally, archived_run, since, now)

    def _archived_pages(self, source: SourceConfig, chunk: list[dict[str, Any]],
                        tally: ReextractionTally) -> list[ArchivedPageWork]:
        """The chunk's archived responses (one read per WARC file for all of them) as the readers' work; a page
        the archive cannot give is counted here."""
        works: list[ArchivedPageWork] = []
        for row, archived in zip(chunk, self.reader.read_many(chunk), strict=True):
            if isinstance(archived, ArchiveUnavailable):
                log.warning("%s: the archived page of %s cannot be read: %s", source.name, row["url"], archived)
                tally.outcomes["archive_unreadable"] += 1
            elif archived is None:
                tally.outcomes["not_archived"] += 1
            else:
                works.append((row["url"], row.get("kind") or "details", int(row.get("depth") or 0), archived))
        return works

    def _read_earlier(self, source: SourceConfig, not_the_page: dict[str, datetime], queue: deque[dict[str, Any]],
                      tally: ReextractionTally) -> None:
        """Pages whose archived response was not the page (a block, a challenge answered 200, a 5xx, a 429): the
        response archived before each is read instead (the page as the site last showed it), whenever archived;
        a URL with none has no page to read (``no_page_archived``: a failure of the run, its record left as it
        is). One index query for the chunk's URLs."""
        if not_the_page:
            _queue_pages(self.index.earlier_of(source.name, not_the_page), len(not_the_page), queue, tally,
                         "read_earlier", "no_page_archived")

    def _mark_gone(self, source: SourceConfig, gone: dict[str, str], tally: ReextractionTally) -> None:
        """The records of pages that say their item is gone get ``gone_at`` (unless they have it) and keep their
        values, as a harvest marks them (:meth:`DataHandler.mark_gone`): a re-extraction never brings back an item
        the site said was gone by storing an older page of it."""
        if not gone:
            return
        marks = self.data.mark_gone(source, gone)
        tally.outcomes["records_gone"] += len(marks.marked)
        tally.outcomes["gone_unstored"] += len(marks.unknown)

    def _follow_in_archive(self, source: SourceConfig, links: list[str], queue: deque[dict[str, Any]],
                           tally: ReextractionTally) -> None:
        """The links that read pages gave, which the archive holds and this re-extraction has not read: read
        next (one index query for a whole chunk's links). A link the archive never kept is counted, never
        fetched."""
        if links:
            _queue_pages(self.index.latest_of(source.name, links), len(links), queue, tally,
                         "links_followed_in_archive", "links_not_archived")

    def _write(self, source: SourceConfig, records: list[dict[str, Any]], tally: ReextractionTally) -> None:
        if not records:
            return
        result = self.data.write(source, records, tally.run_id)
        tally.outcomes["records_stored"] += len(records) - len(result.rejected)
        tally.outcomes["records_new"] += result.upserted
        tally.outcomes["records_updated"] += result.matched
        tally.outcomes["records_changed"] += result.changed
        tally.outcomes["records_unchanged"] += result.unchanged
        tally.outcomes["records_refused"] += len(result.rejected)

    def _report(self, source: SourceConfig, tally: ReextractionTally, archived_run: str | None,
                since: timedelta | None, now: datetime) -> dict[str, Any]:
        from harvester.producer.quality import assess_quality, quality_figures

        outcomes = tally.outcomes
        # each page read that was not the page was read again (read_earlier) or ends as no_page_archived
        stored_pages = outcomes["pages_read"] - outcomes["rejected"] - outcomes["read_earlier"] - outcomes[
            "no_page_archived"]
        failures = {reason: outcomes[counter] for reason, counter in (
            ("record rejected", "rejected"), ("no archived response shows the page", "no_page_archived"),
            ("archived page unreadable", "archive_unreadable"),  # its file deleted outside the retention, damaged
            ("not archived", "not_archived")) if outcomes[counter]}
        report: dict[str, Any] = {
            "source": source.name, "run_id": tally.run_id, "kind": "reextraction", "requests": 0,
            "window": {"run": archived_run, "since": str(since) if since is not None else None},
            "tasks_stored": max(0, stored_pages), "tasks_failed": sum(failures.values()),
            "failures_by_reason": failures,
            **{name: int(amount) for name, amount in sorted(outcomes.items())},
            "complete": True, "reader_processes": tally.reader_processes,
        }
        finished_at = datetime.now(UTC)  # (``now`` is when it started: the run's id and window)
        report.update(finished_at=finished_at, duration_seconds=round((finished_at - now).total_seconds(), 3))
        report.update(quality_figures(report, tally.figures))
        report["quality"] = assess_quality(report, source.quality or Quality())
        if self.figures is not None and tally.figures:
            self.figures.add(source.name, tally.run_id, tally.figures)
        self.runs.record_report(source.name, tally.run_id, report)
        return report


def _queue_pages(rows: dict[str, dict[str, Any]], asked: int, queue: deque[dict[str, Any]], tally: ReextractionTally,
                 found: str, missing: str) -> None:
    """Queue the index rows found for ``asked`` URLs (a browser page's JSON is data, never a page to read) and count
    them under ``found``, the URLs without one under ``missing``."""
    pages = [row for row in rows.values() if row.get("kind") != DATA_RESPONSE_KIND]
    queue.extend(pages)
    tally.outcomes[found] += len(pages)
    tally.outcomes[missing] += asked - len(pages)
