"""How far a run has come, and its final report. Read from the packages, the output and dead letters.

A run is complete when every package is finished. :class:`RunMonitor` only reads (the operators' page and
``harvester runs show`` call it); :class:`RunSettlement` is the step that writes: ``settle`` counts down the
tasks the distributor dead-lettered without a count-down (reaped past their retries, or MongoDB was down
when they died) from the dead-letter entries that carry their run and package, so a package whose
remaining tasks are all dead also finishes; ``report`` writes the run's final report. The sensor and its
trigger settle, then measure, at every poll; the report task settles once more, then reports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis
from pymongo.database import Database

from harvester.config import Quality
from harvester.distributor import DeadLetters, DeadTasks, count_down_dead, dead_tasks_of_run
from harvester.redis_keys import SourceKeys
from harvester.storage import PackageStatus, PackageStore, RunFigures, RunHosts, RunStore, proxy_tier_traffic


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
    hosts: dict[str, Any] | None = None  # a run over several site hosts: RunMonitor.host_report's figures

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
            + (f"; hosts {self.hosts['done']}/{self.hosts['hosts']} done ({self.hosts['paused']} paused)"
               if self.hosts else "")
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


def links_cut(figures: dict[str, int]) -> dict[str, int]:
    """Links a bound left unfollowed (listing.max_depth, max_new_urls, the listing-page caps): a crawl cut short,
    by the workers' reason (``beyond_max_depth``...)."""
    return {name.removeprefix("links_ignored:"): int(amount) for name, amount in figures.items()
            if name.startswith(("links_ignored:", "links_over_")) and amount}


def archive_figures(figures: dict[str, int]) -> dict[str, Any]:
    """A run with ``output.archive``: the pages it archived and those the archive missed (its gap)."""
    if not figures.get("archived") and not figures.get("archive_gap"):
        return {}
    return {"archive": {"archived": int(figures.get("archived", 0)), "gap": int(figures.get("archive_gap", 0))}}


def proxy_tier_figures(figures: dict[str, int]) -> dict[str, Any]:
    """A run of a source with ``proxy.tiers``: each tier's requests and response bytes (what its proxies billed
    for, near enough: heads and bodies as they came over the wire), cheapest tier or not, as ``proxy_tiers``."""
    tiers = proxy_tier_traffic(figures)
    return {"proxy_tiers": tiers} if tiers else {}


class RunMonitor:
    """Measures a run and computes its report; reads only (settling is :class:`RunSettlement`'s)."""

    def __init__(self, database: Database, output_database: Database, redis_client: redis.Redis) -> None:
        self.packages = PackageStore(database)
        self.runs = RunStore(database)
        self.output_database = output_database
        self.redis = redis_client

    def measure(self, source: str, output_collection: str, run_id: str, dead: DeadTasks | None = None
                ) -> RunProgress:
        """The run's figures now. ``dead``: its dead tasks when the caller has just read them (settling)."""
        dead = dead if dead is not None else dead_tasks_of_run(self.redis, source, run_id)
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
            failures_by_reason=dict(dead.reasons), hosts=self.host_report(source, run_id).get("hosts"),
        ).estimate(self._elapsed(source, run_id))

    def _site_requests(self, source: str, run_id: str) -> dict[str, int] | None:
        """Browser pages of the run and the requests they made to their own site besides their navigation
        (XHR, fetch, documents: each took a rate token); None for a run without browser pages."""
        pages, sub_requests = self.redis.hmget(SourceKeys(source).run_site_requests, f"{run_id}|pages",
                                               f"{run_id}|sub_requests")
        if pages is None:
            return None
        return {"pages": int(pages), "sub_requests": int(sub_requests or 0)}

    def host_report(self, source: str, run_id: str) -> dict[str, Any]:
        """A run over several site hosts: how many, how many done, waiting, paused, unreachable and slowed, and the
        slowest of them by mean fetch time (``{"hosts": {...}}``); nothing for a run on one host."""
        figures = RunHosts(self.redis).read(source, run_id)
        return {"hosts": figures.to_dict()} if figures.hosts > 1 else {}

    def _elapsed(self, source: str, run_id: str) -> float | None:
        """Seconds since the run started; a reported run's duration (its rate stays what it was, not decaying)."""
        run = self.runs.collection.find_one({"source": source, "run_id": run_id},
                                            {"_id": 0, "started_at": 1, "status": 1, "report.duration_seconds": 1})
        duration = (run or {}).get("report", {}).get("duration_seconds")
        if (run or {}).get("status") == "reported" and duration is not None:
            return float(duration)
        started_at = (run or {}).get("started_at")
        if started_at is None:
            return None
        if started_at.tzinfo is None:
            started_at = started_at.replace(tzinfo=UTC)
        return (datetime.now(UTC) - started_at).total_seconds()

    def report_figures(self, source: str, output_collection: str, run_id: str, now: datetime | None = None,
                       attributes: list[str] | None = None, drift_threshold: float = 20.0,
                       dead: DeadTasks | None = None, quality: Quality | None = None,
                       unit: str = "pages") -> dict[str, Any]:
        """The run's figures: URLs planned, records stored (new vs updated), failures by reason, duration,
        (given the source's ``attributes``) extraction health with any selector drift, and the quality
        figures with the run's outcome (``quality``: the thresholds; the source's defaults when None)."""
        now = now or datetime.now(UTC)
        progress = self.measure(source, output_collection, run_id, dead)
        run = self.runs.get(source, run_id) or {}
        started_at = (run.get("started_at") or now).replace(tzinfo=UTC)  # MongoDB gives naive UTC datetimes
        new_records = self.output_database[output_collection].count_documents(
            {"run_id": run_id, "first_seen_at": {"$gte": started_at}}
        )
        plan = run.get("plan", {})
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
            "failures_by_reason": dict(progress.failures_by_reason),
            "started_at": started_at.isoformat(),
            "finished_at": now.isoformat(),
            "duration_seconds": round((now - started_at).total_seconds(), 3),
        }
        browser_requests = self._site_requests(source, run_id)
        if browser_requests is not None:
            report["browser_requests"] = browser_requests
        from harvester.producer.incremental import incremental_report

        report.update(incremental_report(self.output_database[output_collection], self.redis, source, run_id,
                                         started_at, report))
        from harvester.producer.quality import assess_quality, quality_figures

        figures, _ = RunFigures(self.redis).read(source, run_id)
        report.update(quality_figures(report, figures))
        report.update(counted_figures(figures, progress.hosts))
        if attributes:
            from harvester.producer.health import extraction_report

            report["extraction"] = extraction_report(self.output_database[output_collection], self.runs.collection,
                                                     source, run_id, attributes, drift_threshold, figures)
            report["selector_drift"] = report["extraction"]["selector_drift"]
        report["quality"] = assess_quality(report, quality or Quality(), unit)
        return report


def counted_figures(figures: dict[str, Any], hosts: dict[str, Any] | None) -> dict[str, Any]:
    """The report's figures the workers counted for the run: links cut, block pages met (each attempt), the
    archive's, each proxy tier's traffic, and the hosts of a run over several site hosts."""
    counted = {"links_cut": links_cut(figures), "pages_blocked": int(figures.get("pages_blocked", 0))}
    counted.update(archive_figures(figures))
    counted.update(proxy_tier_figures(figures))
    counted.update({"hosts": hosts} if hosts else {})
    return counted


class RunSettlement:
    """The writes of a run's progress: settling its dead tasks, and its final report."""

    def __init__(self, database: Database, output_database: Database, redis_client: redis.Redis) -> None:
        self.monitor = RunMonitor(database, output_database, redis_client)
        self.packages = self.monitor.packages
        self.redis = redis_client

    def settle(self, source: str, run_id: str) -> DeadTasks:
        """Count the run's dead-lettered tasks down as failed (those no count-down reached) and finish the
        packages left with nothing pending (a count-down that died between its two updates)."""
        dead = dead_tasks_of_run(self.redis, source, run_id)
        count_down_dead(self.packages, source, {run_id: dead})
        self.packages.finish_empty(source, run_id)
        return dead

    def settle_and_measure(self, source: str, output_collection: str, run_id: str) -> RunProgress:
        """One poll of the sensor (and its trigger): settle, then measure."""
        return self.monitor.measure(source, output_collection, run_id, self.settle(source, run_id))

    def report(self, source: str, output_collection: str, run_id: str, now: datetime | None = None,
               attributes: list[str] | None = None, drift_threshold: float = 20.0,
               quality: Quality | None = None, unit: str = "pages") -> dict[str, Any]:
        """Settle a last time, then write the run's report (and its extraction health and outcome, for the
        metrics and the page); the per-run dead-letter records of the runs before it go.

        A complete run already reported (the ``report`` task retried after an error) answers its stored report,
        as it was written and published: its figures, finish time and duration."""
        reported = self.monitor.runs.get(source, run_id) or {}
        if reported.get("status") == "reported" and (reported.get("report") or {}).get("complete"):
            DeadLetters(self.redis).end_runs_before(source, run_id)  # written, then a crash before this
            return dict(reported["report"])
        dead = self.settle(source, run_id)
        report = self.monitor.report_figures(source, output_collection, run_id, now, attributes, drift_threshold,
                                             dead, quality, unit)
        if report.get("extraction", {}).get("records"):  # a run that extracted nothing keeps the last health
            from harvester.producer.health import publish_health

            publish_health(self.redis, source, report["extraction"])
        from harvester.producer.quality import publish_run_quality

        publish_run_quality(self.redis, source, report)
        self.monitor.runs.record_report(source, run_id, report)
        # The run is over: the per-run dead-letter records of the runs before it go (the dead letters themselves
        # stay, capped); its own stay until the next run reports, so a cleared DAG run reports the same figures.
        DeadLetters(self.redis).end_runs_before(source, run_id)
        self.redis.hdel(SourceKeys(source).run_site_requests, f"{run_id}|pages", f"{run_id}|sub_requests")
        return report
