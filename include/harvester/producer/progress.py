"""How far a run has come, and its final report. Read from the packages, the output and dead letters.

A run is complete when every package is finished. Tasks the distributor dead-lettered (past their
retries, or reaped once too often) are settled here as failed, from the dead-letter entries that
carry their run and package, so a package whose remaining tasks are all dead also finishes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis
from pymongo.database import Database

from harvester.redis_keys import SourceKeys
from harvester.storage.packages import PackageStatus, PackageStore
from harvester.storage.runs import RunStore

DEAD_PAGE = 5000


@dataclass
class DeadTasks:
    """This run's dead-lettered tasks: ids by package, and how many per reason."""

    by_package: dict[int, set[str]] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)


def dead_tasks_of_run(client: redis.Redis, source: str, run_id: str) -> DeadTasks:
    """Scan the source's dead letters (entries ``{message, reason, failed_at}``) for this run's tasks.

    The list moves while it is read in pages: the distributor appends at the tail and drops the oldest
    at the head (past the cap, or a re-queue). So the pages are read from the tail with negative indexes,
    which a head pop never changes: an entry present for the whole scan can only move deeper, towards
    the pages still to come, so none is missed; one seen twice (the tail grew between pages) is
    counted once."""
    keys = SourceKeys(source)
    dead = DeadTasks()
    if not int(client.hget(keys.run_dead, run_id) or 0):
        return dead  # the distributor counts dead tasks per run: nothing to scan
    seen: set[bytes | str] = set()
    end = -1
    while page := client.lrange(keys.dead_letters, end - DEAD_PAGE + 1, end):
        for raw in page:
            if raw in seen:
                continue
            try:
                entry = json.loads(raw)
                message = entry["message"]
                if isinstance(message, str):
                    message = json.loads(message)
            except (ValueError, KeyError, TypeError):
                continue
            if message.get("run_id") != run_id:
                continue
            seen.add(raw)
            reason = str(entry.get("reason") or "unknown")
            dead.reasons[reason.split(":", 1)[0].strip() or "unknown"] += 1
            if message.get("package_id") is not None and message.get("task_id"):
                dead.by_package.setdefault(int(message["package_id"]), set()).add(str(message["task_id"]))
        if len(page) < DEAD_PAGE:
            break  # this page reached the head
        end -= DEAD_PAGE
    return dead


@dataclass
class RunProgress:
    source: str
    run_id: str
    packages_total: int = 0
    packages_waiting: int = 0
    packages_running: int = 0
    packages_finished: int = 0
    tasks_planned: int = 0
    tasks_discovered: int = 0
    tasks_pending: int = 0
    tasks_done: int = 0
    tasks_failed: int = 0
    tasks_lost: int = 0
    records_stored: int = 0
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    elapsed_seconds: float | None = None  # since the run started (its first start, when resumed)
    pages_per_minute: float | None = None
    eta_seconds: float | None = None

    @property
    def complete(self) -> bool:
        return self.packages_finished == self.packages_total

    def estimate(self, elapsed_seconds: float | None) -> RunProgress:
        """Pages settled (stored or failed) per minute since the start, and the time the pending ones need."""
        self.elapsed_seconds = elapsed_seconds
        settled = self.tasks_done + self.tasks_failed
        if elapsed_seconds is None or elapsed_seconds <= 0:
            return self
        self.pages_per_minute = round(settled * 60 / elapsed_seconds, 2)
        if self.complete or self.tasks_pending == 0:
            self.eta_seconds = 0.0
        elif settled:
            self.eta_seconds = round(self.tasks_pending * 60 / self.pages_per_minute, 1)
        return self

    def line(self) -> str:
        """One log line for the sensor's log in the Airflow UI."""
        failures = ", ".join(f"{reason} {count}" for reason, count in sorted(self.failures_by_reason.items()))
        return (
            f"{self.source} {self.run_id}: packages {self.packages_finished}/{self.packages_total} done "
            f"({self.packages_running} running, {self.packages_waiting} waiting); "
            f"tasks {self.tasks_done} stored, {self.tasks_pending} pending, {self.tasks_failed} failed; "
            f"records stored {self.records_stored}" + (f"; failures: {failures}" if failures else "")
            + (f"; {self.pages_per_minute:g} pages/min" if self.pages_per_minute is not None else "")
            + (f", ETA {format_eta(self.eta_seconds)}" if self.eta_seconds is not None else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "complete": self.complete}


def format_eta(seconds: float) -> str:
    """1h02m, 4m10s, 12s: short enough for a log line and a table cell."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class RunMonitor:
    """Measures a run (settling dead-lettered tasks first) and writes its report."""

    def __init__(self, database: Database, output_database: Database, redis_client: redis.Redis) -> None:
        self.packages = PackageStore(database)
        self.runs = RunStore(database)
        self.output_database = output_database
        self.redis = redis_client

    def settle_dead_letters(self, source: str, run_id: str) -> DeadTasks:
        dead = dead_tasks_of_run(self.redis, source, run_id)
        if dead.by_package:
            self.packages.settle_dead(source, run_id, dead.by_package)
        return dead

    def measure(self, source: str, output_collection: str, run_id: str) -> RunProgress:
        dead = self.settle_dead_letters(source, run_id)
        self.packages.finish_empty(source, run_id)
        statuses, tasks = self.packages.summary(source, run_id)
        return RunProgress(
            source=source, run_id=run_id,
            packages_total=sum(statuses.values()),
            packages_waiting=statuses[PackageStatus.WAITING],
            packages_running=statuses[PackageStatus.RUNNING],
            packages_finished=statuses[PackageStatus.FINISHED],
            tasks_planned=tasks["planned"], tasks_discovered=tasks["discovered"], tasks_pending=tasks["pending"],
            tasks_done=tasks["done"], tasks_failed=tasks["failed"], tasks_lost=tasks["lost"],
            records_stored=self.output_database[output_collection].count_documents({"run_id": run_id}),
            failures_by_reason=dict(dead.reasons),
        ).estimate(self._elapsed(source, run_id))

    def _site_requests(self, source: str, run_id: str) -> dict[str, int] | None:
        """Browser pages of the run and the requests they made to their own site besides their navigation
        (XHR, fetch, documents: each took a rate token); None for a run without browser pages."""
        pages, sub_requests = self.redis.hmget(SourceKeys(source).run_site_requests, f"{run_id}|pages",
                                               f"{run_id}|sub_requests")
        if pages is None:
            return None
        return {"pages": int(pages), "sub_requests": int(sub_requests or 0)}

    def _elapsed(self, source: str, run_id: str) -> float | None:
        run = self.runs.collection.find_one({"source": source, "run_id": run_id}, {"_id": 0, "started_at": 1})
        started_at = (run or {}).get("started_at")
        if started_at is None:
            return None
        if started_at.tzinfo is None:
            started_at = started_at.replace(tzinfo=UTC)
        return (datetime.now(UTC) - started_at).total_seconds()

    def report(self, source: str, output_collection: str, run_id: str, now: datetime | None = None,
               attributes: list[str] | None = None, drift_threshold: float = 20.0) -> dict[str, Any]:
        """The run's figures: URLs planned, records stored (new vs updated), failures by reason, duration,
        and (given the source's ``attributes``) extraction health with any selector drift."""
        now = now or datetime.now(UTC)
        progress = self.measure(source, output_collection, run_id)
        run = self.runs.get(source, run_id) or {}
        started_at = run.get("started_at") or now
        if started_at.tzinfo is None:
            started_at = started_at.replace(tzinfo=UTC)
        new_records = self.output_database[output_collection].count_documents(
            {"run_id": run_id, "first_seen_at": {"$gte": started_at}}
        )
        plan = run.get("plan", {})
        failures = dict(progress.failures_by_reason)
        report = {
            "source": source,
            "run_id": run_id,
            "complete": progress.complete,
            "urls_planned": plan.get("urls_planned", progress.tasks_planned),
            "urls_skipped_fresh": plan.get("skipped_fresh", 0),
            "urls_skipped_invalid": plan.get("skipped_invalid", 0),
            "batch_limit_reached": plan.get("batch_limit_reached", False),
            "packages": progress.packages_total,
            "packages_finished": progress.packages_finished,
            "tasks_discovered": progress.tasks_discovered,
            "tasks_stored": progress.tasks_done,
            "tasks_failed": progress.tasks_failed,
            "tasks_lost_at_resume": progress.tasks_lost,
            "records_stored": progress.records_stored,
            "records_new": new_records,
            "records_updated": progress.records_stored - new_records,
            "failures_by_reason": failures,
            "started_at": started_at.isoformat(),
            "finished_at": now.isoformat(),
            "duration_seconds": round((now - started_at).total_seconds(), 3),
        }
        browser_requests = self._site_requests(source, run_id)
        if browser_requests is not None:
            report["browser_requests"] = browser_requests
        if attributes:
            from harvester.producer.health import extraction_report, publish_health

            report["extraction"] = extraction_report(self.output_database[output_collection], self.runs.collection,
                                                     source, run_id, attributes, drift_threshold)
            report["selector_drift"] = report["extraction"]["selector_drift"]
            publish_health(self.redis, source, report["extraction"])
        self.runs.record_report(source, run_id, report)
        # The run is over: its per-run dead-letter records go (the dead letters themselves stay, capped).
        from harvester.distributor import DeadLetters

        DeadLetters(self.redis).end_run(source, run_id)
        self.redis.hdel(SourceKeys(source).run_site_requests, f"{run_id}|pages", f"{run_id}|sub_requests")
        return report
