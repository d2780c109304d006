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
from harvester.scraping import PageResult
from harvester.settings import HarvesterSettings
from harvester.storage import DataHandler, URLStore
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

    def write(self, source: SourceConfig, items: list[StoredPage], report: BatchReport) -> list[TaskMessage]:
        """One bulk_write per run; returns the tasks whose records are stored. A detail page whose record
        MongoDB refuses is dead-lettered; a listing page gives many records (``listing.records``), and one
        of them refused is counted while the page and its other records stand. On a storage failure every
        task is retried and none is returned."""
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
                        records.append(with_validators(record, page))
                        owners.append((message, page))
                result = self.data.write(source, records, run_id)
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
                self.urls.mark_seen(source, [page.url for _, page in items if page.kind != "listing"])
            return [message for message, _ in items]
        except Exception as error:  # the output is unreachable: nothing is lost, the tasks come back
            log.exception("writing %d pages of records of %s failed", len(items), source.name)
            report.outcomes["storage_error"] += len(items)
            for message, _ in items:
                self.failures.retry(message, f"storage failed: {type(error).__name__}: {error}", None, report)
            return []

    def complete(self, source: SourceConfig, messages: list[TaskMessage], report: BatchReport | None = None) -> None:
        """Count the packages of finished tasks down (one call per package), THEN release their leases.

        This order never strands a package: a count-down that fails (MongoDB down) hands its tasks back
        for a retry (their records are upserts, so the retry stores nothing twice), and a release that
        fails after the count-down only lets the lease expire (counting down again changes nothing)."""
        if not messages:
            return
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
        self.store.release(source.name, {message.task_id: str(message.lease_token) for message in counted})
