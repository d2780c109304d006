"""A batch's fetched responses into the source's WARC archive, before anything of them is stored (for a browser
page, its main document and the JSON responses its data came from).

Archiving comes first so that a source whose archive is ``required`` can hand the whole batch back (retried
later, nothing stored twice) when the archive cannot be written. Otherwise a failed or slow archive never costs
a record nor stalls the harvest: the pages are settled as always and the pages that missed the archive are
counted (``archive_gap``, a source outcome that the run report shows and the ``HarvesterArchiveGap`` alert
watches). The writer is opened on the first archived batch, so a worker of sources without an archive never
loads warcio or fsspec.

Rejected HTTP pages are kept too, as evidence (:class:`RejectedEvidence`): not the archive, the bounded store the
browser's snapshots use, so a dead letter links to the page that earned it.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime

from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import ArchiveUnavailable, ConnectionNotFound, StorageError
from harvester.scraping import FetchResult
from harvester.settings import HarvesterSettings
from harvester.storage import DATA_RESPONSE_KIND, ArchivedPage, ArchiveWriter, PageEvidence, SnapshotStore
from harvester.workers.report import BatchReport

log = logging.getLogger(__name__)


class PageArchive:
    """The worker's side of the archive: which fetched pages go, and what a failure means for the batch."""

    def __init__(self, settings: HarvesterSettings) -> None:
        self.settings = settings
        self._writer: ArchiveWriter | None = None

    @property
    def writer(self) -> ArchiveWriter:
        if self._writer is None:
            from harvester.storage import ArchiveWriter

            self._writer = ArchiveWriter.from_settings(self.settings)
        return self._writer

    def keep(self, source: SourceConfig, messages: list[TaskMessage], fetches: list[FetchResult],
             report: BatchReport) -> str | None:
        """Archive the batch's fetched pages; None when the batch goes on, else the reason it must be retried
        (the archive is ``required`` and could not be written)."""
        if not source.output.archive.enabled:
            return None
        pages: list[ArchivedPage] = []
        for message, fetch in zip(messages, fetches, strict=True):
            if fetch.outcome == "skipped":
                continue
            fetched_at = datetime.fromtimestamp(fetch.started_at or 0.0, UTC)
            if fetch.exchange is not None:
                pages.append(ArchivedPage(message.task_id or "", message.run_id or "", message.url, fetch.exchange,
                                          fetched_at, message.kind, message.depth))
            # a browser page's JSON, by its own URL (its data: replayed, never re-extracted as a page)
            pages.extend(ArchivedPage(message.task_id or "", message.run_id or "", data.url, data, fetched_at,
                                      DATA_RESPONSE_KIND, message.depth) for data in fetch.data_exchanges)
        if not pages:
            return None
        try:
            report.outcomes["archived"] += self.writer.archive(source, pages)
            self.count_by_run(report, pages, "archived")
        except (ArchiveUnavailable, ConnectionNotFound) as error:
            log.warning("%s: %d fetched pages could not be archived: %s", source.name, len(pages), error)
            if source.output.archive.required:
                report.outcomes["archive_retried"] += len(pages)
                return f"archive required and unavailable: {error}"
            report.outcomes["archive_gap"] += len(pages)
            self.count_by_run(report, pages, "archive_gap")
        return None

    @staticmethod
    def count_by_run(report: BatchReport, pages: list[ArchivedPage], figure: str) -> None:
        """The run's figures too (sent with the batch's counters): the run report shows its archive and gap."""
        for run_id, count in Counter(page.run_id for page in pages).items():
            if run_id:
                report.extracted.by_run[run_id][figure] += count

    def flush(self) -> bool:
        """The index rows written behind (``archive_index_flush_seconds``) into the index now; False when refused."""
        return self._writer is None or self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class RejectedEvidence:
    """A worker's store of rejected HTTP pages' bodies, opened on the first one (see the module docstring)."""

    def __init__(self, settings: HarvesterSettings) -> None:
        self.settings = settings
        self._evidence: SnapshotStore | None = None

    def keep(self, source: SourceConfig, rejected: list[tuple[TaskMessage, FetchResult, str]],
             report: BatchReport) -> None:
        """Rejected HTTP pages keep their bodies (bounded, for ``browser_snapshot_keep_days``) in the evidence store
        the browser's snapshots use, in one bulk write before their dead letters are written, so each letter links
        to its page at once (a slot keeps its browser pages' snapshots itself). Evidence that cannot be kept never
        fails the batch."""
        pages = [PageEvidence(message.task_id, fetch.final_url or message.url, reason, fetch.text or "",
                              run_id=message.run_id)
                 for message, fetch, reason in rejected if message.task_id]
        if source.render != "http" or not pages:
            return
        try:
            if self._evidence is None:
                self._evidence = SnapshotStore.from_settings(self.settings)
            saved = self._evidence.save_many(source.name, pages)
            report.outcomes["evidence_kept"] += len(saved)
            if saved.not_kept:  # over the run's or the source's evidence caps: counted, not kept
                report.outcomes["evidence_not_kept"] += saved.not_kept
        except (StorageError, ConnectionNotFound) as error:
            log.warning("%s: keeping the bodies of %d rejected pages as evidence failed: %s", source.name,
                        len(pages), error)
