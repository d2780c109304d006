"""The settler: a batch's records written, then its finished tasks released and counted down.

The order is the contract of DESIGN.md section 1: ONE ``bulk_write`` per run in the batch (usually
one), and only THEN the leases released and the packages counted down, so a task is never reported
done before its record is stored. A record the output refuses (no key) is dead-lettered; an
unreachable output sends every task of the write back for a retry, and nothing is lost.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from harvester.config import SourceConfig
from harvester.distributor import RateLimitStore, TaskMessage
from harvester.errors import StorageError
from harvester.scraping import PageResult
from harvester.settings import HarvesterSettings
from harvester.storage import REQUESTED_URLS, DataHandler, URLStore
from harvester.workers.failures import FailurePolicy
from harvester.workers.incremental import with_validators
from harvester.workers.report import BatchReport

if TYPE_CHECKING:
    from harvester.storage import PackageStore
    from harvester.workers.clients import WorkerClients

log = logging.getLogger(__name__)
StoredPage = tuple[TaskMessage, PageResult]


class Settler:
    """Writes records, marks their URLs seen, releases finished tasks and counts their packages down."""

    def __init__(self, store: RateLimitStore, data: DataHandler, urls: URLStore,
                 packages: Callable[[], PackageStore], failures: FailurePolicy) -> None:
        self.store = store
        self.data = data
        self.urls = urls
        self.packages = packages
        self.failures = failures

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, clients: WorkerClients, failures: FailurePolicy) -> Settler:
        return cls(clients.store, clients.data, clients.urls, lambda: clients.packages, failures)

    def write(self, source: SourceConfig, items: list[StoredPage], report: BatchReport,
              config_version: str | None = None) -> list[TaskMessage]:
        """One bulk_write per run; returns the tasks whose records are stored. A detail page whose record
        MongoDB refuses is dead-lettered; a listing page gives many records (``listing.records``), and one
        of them refused is counted while the page and its other records stand. On a storage failure every
        task is retried and none is returned. ``config_version``: the registered config that extracted them."""
        if not items:
            return []
        items = list(items)
        by_run: dict[str | None, list[StoredPage]] = defaultdict(list)
        for message, page in items:
            by_run[message.run_id].append((message, page))
        try:
            records_stored = 0
            for run_id, group in by_run.items():
                records: list[dict] = []
                owners: list[StoredPage] = []  # the page each record came from, by position
                for message, page in group:
                    for record in page.records:
                        record = with_validators(record, page)
                        if page.requested_url is not None:  # a redirect that stayed on the item
                            record = {**record, REQUESTED_URLS: [page.requested_url]}
                        records.append(record)
                        owners.append((message, page))
                result = self.data.write(source, records, run_id, config_version=config_version)
                if result.back:
                    report.outcomes["records_back"] += result.back
                    report.extracted.by_run[run_id]["records_back"] += result.back
                report.outcomes["records_new"] += result.upserted
                report.outcomes["records_updated"] += result.matched
                report.outcomes["records_changed"] += result.changed
                report.outcomes["records_unchanged"] += result.unchanged
                if result.empty_kept:  # empty records that left the stored ones as they were
                    report.outcomes["records_empty_kept"] += result.empty_kept
                records_stored += len(records) - len(result.rejected)
                for position, reason in result.rejected.items():
                    report.outcomes["rejected"] += 1
                    message, page = owners[position]
                    if page.kind == "listing":
                        log.warning("%s: a record of listing page %s was refused: %s", source.name, message.url, reason)
                        continue
                    items.remove((message, page))
                    self.failures.dead_letter(message, f"record rejected: {reason}", report)
            report.stored += len(items)
            report.outcomes["records_stored"] += records_stored
            if not self.data.discarding:  # detail pages only: a listing page is visited again each run
                self.urls.mark_seen(source, [url for _, page in items if page.kind != "listing"
                                             for url in (page.url, page.requested_url) if url])
            return [message for message, _ in items]
        except Exception as error:  # the output is unreachable: nothing is lost, the tasks come back
            log.exception("writing %d pages of records of %s failed", len(items), source.name)
            report.outcomes["storage_error"] += len(items)
            for message, _ in items:
                self.failures.retry(message, f"storage failed: {type(error).__name__}: {error}", None, report)
            return []

    def settle_items(self, source: SourceConfig, items: list[StoredPage], gone: list[StoredPage], report: BatchReport,
                     config_version: str | None = None) -> tuple[list[TaskMessage], list[TaskMessage]]:
        """(the tasks of gone pages that are done, the tasks whose records are stored): redirects settled first
        (a record moved to its final URL, or its item gone), then the gone pages marked, then the records written."""
        items, redirected_away = self.separate_redirects(source, items, report)
        done = self.settle_gone(source, gone + redirected_away, report)
        return done, self.write(source, items, report, config_version)

    def separate_redirects(self, source: SourceConfig, items: list[StoredPage], report: BatchReport
                           ) -> tuple[list[StoredPage], list[StoredPage]]:
        """Pages to store, and pages whose redirect reached ANOTHER item's stored record (now gone, under the
        URL asked for). Records still under a requested URL move to the final one first, so one item stays one
        record. When MongoDB cannot say, the pages are stored as they are (the next visit settles it)."""
        moves = {page.requested_url: page.url for _, page in items if page.requested_url is not None}
        if not moves:
            return items, []
        try:
            left = self.data.settle_redirects(source, moves)
        except StorageError as error:
            log.warning("%s: settling %d redirected pages failed (%s): stored under their final URLs", source.name,
                        len(moves), error)
            return items, []
        report.outcomes["redirected_items"] += len(moves) - len(left)
        stored, gone = [], []
        for message, page in items:
            if page.requested_url is not None and page.requested_url in left:
                page.gone, page.url, page.requested_url = left[page.requested_url], page.requested_url, None
                gone.append((message, page))
            else:
                stored.append((message, page))
        return stored, gone

    def settle_gone(self, source: SourceConfig, pages: list[StoredPage], report: BatchReport) -> list[TaskMessage]:
        """Detail pages whose item is gone: their records get ``gone_at`` and keep their values, and the tasks
        are done (a gone item is news about the site, not a failure: no retry, no dead letter). A page with no
        stored record has nothing to mark: it fails as before (a 404 to a link never harvested is a broken link
        or a bad input URL, which the run must show), counted ``gone_unstored``. On a storage failure the tasks
        are retried."""
        if not pages:
            return []
        reasons = {page.url: page.gone or "gone" for _, page in pages}
        try:
            marks = self.data.mark_gone(source, reasons)
        except StorageError as error:
            report.outcomes["storage_error"] += len(pages)
            for message, _ in pages:
                self.failures.retry(message, f"storage failed: {type(error).__name__}: {error}", None, report)
            return []
        marked, unknown = set(marks.marked), set(marks.unknown)
        done: list[TaskMessage] = []
        for message, page in pages:
            if page.url in unknown:
                report.outcomes["gone_unstored"] += 1
                if not page.fetch.ok:  # its status said so: the failure it always was (http_404, http_410)
                    self.failures.fetch_failed(source, message, page.fetch, report)
                else:
                    self.failures.dead_letter(message, f"gone: {page.gone}; no record of the item is stored", report)
                continue
            if page.url in marked:
                report.outcomes["records_gone"] += 1
                report.extracted.by_run[message.run_id]["records_gone"] += 1
            report.outcomes["gone"] += 1
            done.append(message)
        return done

    def complete(self, source: SourceConfig, messages: list[TaskMessage], report: BatchReport | None = None) -> None:
        """Count the packages of finished tasks down (one call per package), THEN release their leases.

        This order never strands a package: a count-down that fails (MongoDB down) hands its tasks back
        for a retry (their records are upserts, so the retry stores nothing twice), and a release that
        fails after the count-down only lets the lease expire (counting down again changes nothing)."""
        if not messages:
            return
        counted = self.count_down(source, messages, report)
        self.store.release(source.name, {message.task_id: str(message.lease_token) for message in counted})

    def count_down(self, source: SourceConfig, messages: list[TaskMessage],
                   report: BatchReport | None = None) -> list[TaskMessage]:
        """:meth:`complete`'s first half: count the packages of finished tasks down; the tasks counted (those of a
        count-down that failed were handed back for a retry), whose leases the caller releases or hands on."""
        report = report if report is not None else BatchReport(source=source.name)
        by_package: dict[tuple[str, int], list[TaskMessage]] = defaultdict(list)
        counted: list[TaskMessage] = []
        for message in messages:
            if message.run_id is not None and message.package_id is not None:
                by_package[(message.run_id, message.package_id)].append(message)
            else:
                counted.append(message)
        for (run_id, package_id), group in by_package.items():
            try:
                self.packages().complete_tasks(source.name, run_id, package_id, [message.task_id for message in group])
            except Exception as error:  # MongoDB down or worse: the group's tasks are retried, never stranded
                log.warning("counting down package %s of run %s failed (%s: %s): its %d tasks are retried", package_id,
                            run_id, type(error).__name__, error, len(group))
                report.outcomes["count_down_failed"] += len(group)
                for message in group:
                    self.failures.retry(message, f"package count-down failed: {type(error).__name__}: {error}",
                                        None, report)
            else:
                counted.extend(group)
        return counted
