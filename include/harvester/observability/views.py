"""What the operators' page and its JSON API show, computed from Redis and MongoDB (no Airflow here).

The Airflow plugin (harvester.airflow.plugin) only adds authentication, the routes and the job
trigger; every figure comes from :class:`HarvestViews`, so a test can check them on a seeded state.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis
from bson import ObjectId
from bson.errors import InvalidId
from pydantic import BaseModel, Field
from pymongo.database import Database

from harvester.config import SourceConfig
from harvester.distributor import DeadLetters
from harvester.errors import UnknownSource
from harvester.metrics import HarvestSnapshot, SourceSnapshot, read_snapshot, slots_by_country_and_state
from harvester.pageslots import SlotRegistry, last_decision, proxy_bytes_by_country, proxy_figures
from harvester.producer import RunMonitor, format_eta
from harvester.settings import HarvesterSettings
from harvester.storage import RUNS_COLLECTION, PageSnapshot, SnapshotStore

MAX_PAGE = 500


RUN_OUTCOME_WORDS = {"green": "success", "degraded": "success, degraded", "failed": "failed", "running": "running"}


def run_outcome(run: dict[str, Any]) -> tuple[str, str]:
    """(green, degraded, failed or running; the reason in words) of a run document, from its data."""
    report = run.get("report") or {}
    if not report:
        return "running", f"{run.get('status', 'planning')}: no report yet"
    quality = report.get("quality") or {}
    outcome, reason = quality.get("outcome"), quality.get("reason", "")
    if outcome is None:  # reported before runs had an outcome: complete or not is all it says
        outcome = "green" if report.get("complete") else "degraded"
    if not reason and not report.get("urls_planned") and not report.get("tasks_discovered"):
        fresh = int(report.get("urls_skipped_fresh", 0))
        reason = f"nothing was due ({fresh} URLs harvested within the harvesting lag)" if fresh else "nothing was due"
    if not report.get("complete"):
        missing = int(report.get("packages", 0)) - int(report.get("packages_finished", 0))
        incomplete = f"reported with {missing} package(s) unfinished"
        reason = f"{reason}; {incomplete}" if reason else incomplete
        outcome = "degraded" if outcome == "green" else outcome
    return outcome, reason


class LastRun(BaseModel):
    run_id: str
    status: str
    started_at: datetime | None = None
    outcome: str = Field(description="green, degraded or failed (from the run's data), or running")
    outcome_words: str = Field(default="", description="success, success, degraded, failed or running")
    reason: str = Field(default="", description="Why the run is degraded or failed, in one line.")
    rejected_share: float | None = Field(default=None, description="Share (0-1) of extracted records rejected.")
    records_stored: int | None = None
    selector_drift: list[str] = Field(default_factory=list)


class AttributeHealth(BaseModel):
    attribute: str
    share: float = Field(description="Share (0-1) of the last run's records that had the attribute.")
    median: float | None = Field(description="Median share over the previous runs (None: no history).")
    drop: float = Field(description="Percentage points below the median.")
    drift: bool = Field(description="True when the drop passed the source's drift_threshold.")


class SourceSummary(BaseModel):
    name: str
    dag_id: str
    queue: str
    render: str
    country: str | None
    pending: int
    delayed: int
    active: int
    max_active: int
    started_last_minute: int = Field(description="Admissions in the rolling rate window.")
    per_minute: int
    done: int
    failed: int = Field(description="Failed attempts (retries and dead letters).")
    failed_by_reason: dict[str, int]
    dead_letters: int
    paused: bool
    paused_hosts: dict[str, float] = Field(description="Host -> seconds it still waits (Retry-After).")
    records_stored: int
    records_not_modified: int = Field(default=0, description="Records 304 answers kept (conditional requests).")
    pages_blocked: int = Field(default=0, description="Block pages met (challenges, denials): retried, never stored.")
    host_unreachable: int = Field(default=0, description="Pages whose host could not be reached (refused, DNS "
                                  "failing, connect or first-byte timeout); in a row, they pause the host (breaker).")
    bytes_saved: int = Field(default=0, description="Body bytes those 304 answers did not send.")
    hosts: dict[str, Any] | None = Field(default=None, description="The site hosts of the run the workers wrote "
                                         "last, when it fetched from several: as RunProgressView.hosts.")
    drift_threshold: float
    selector_drift: list[str]
    extraction: list[AttributeHealth]
    last_run: LastRun | None = None


class RunProgressView(BaseModel):
    source: str
    run_id: str
    complete: bool
    packages_total: int
    packages_finished: int
    packages_running: int
    packages_waiting: int
    tasks_done: int
    tasks_pending: int
    tasks_failed: int
    records_stored: int
    failures_by_reason: dict[str, int]
    elapsed_seconds: float | None
    pages_per_minute: float | None
    eta_seconds: float | None
    hosts: dict[str, Any] | None = Field(default=None, description="A run over several site hosts: hosts, done, "
                                         "waiting, in_flight, paused, unreachable, slowed, and the slowest (host, "
                                         "pages, mean_seconds, unreachable).")
    eta: str | None = Field(description="The ETA, formatted (4m10s).")
    line: str = Field(description="The progress line the sensor logs.")


class RunSummary(BaseModel):
    run_id: str
    status: str
    started_at: datetime | None = None
    airflow_run_ids: list[str] = Field(default_factory=list)
    outcome: str = Field(default="running", description="green, degraded, failed, or running (no report yet)")
    outcome_words: str = Field(default="running", description="success, success, degraded, failed or running")
    reason: str = Field(default="", description="Why the run is degraded or failed, in one line.")
    rejected_share: float | None = Field(default=None, description="Share (0-1) of extracted records rejected.")
    progress: RunProgressView | None = Field(default=None, description="While running: progress, rate and ETA.")
    report: dict[str, Any] | None = None


class SlotsView(BaseModel):
    by_country: dict[str, dict[str, int]] = Field(description="Country -> slot state -> slots.")
    proxy_bytes: dict[str, int] = Field(description="Country -> bytes browsed through its proxy.")
    proxies: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="Country -> each proxy of its pool: proxy, state (in or out), requests, "
                                          "errors, bans, bytes, consecutive_failures.")
    last_decision: dict[str, Any] | None = Field(description="The allocator's last decision.")
    decision: list[str] = Field(default_factory=list,
                                description="The allocator's last decision as the sentences it logs.")
    decided_at: datetime | None = Field(default=None, description="When it decided.")
    slots: list[dict[str, Any]]


class DeadLetterView(BaseModel):
    index: int
    url: str | None
    task_id: str | None
    run_id: str | None
    attempt: int | None
    reason: str
    failed_at: datetime
    snapshot: bool = Field(default=False, description="The page's evidence is kept (a failed or rejected browser "
                                                      "page's HTML and screenshot, a rejected HTTP page's body): "
                                                      "GET .../dead-letters/{task_id}/snapshot and /screenshot.")
    screenshot: bool = Field(default=False, description="The evidence has a screenshot (browser pages).")


class DeadLettersView(BaseModel):
    source: str
    total: int
    entries: list[DeadLetterView]


class RequeueResult(BaseModel):
    source: str
    requeued: int
    remaining: int


class RunRecordsView(BaseModel):
    source: str
    run_id: str
    outcome: str
    outcome_words: str
    reason: str
    records: list[dict[str, Any]] = Field(description="The run's first records.")
    records_stored: int
    rejections: list[DeadLetterView] = Field(description="The run's dead letters (rejected pages among them), "
                                                         "each with a link to its evidence when kept.")
    rejections_by_attribute: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="attribute -> rule -> records rejected (the report's figures).")


class ResultsPage(BaseModel):
    source: str
    records: list[dict[str, Any]]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; None at the end.")


def decision_sentences(decision: dict[str, Any] | None) -> list[str]:
    """The allocator's decision as the page shows it: the sentences its step logs (``StepReport.story``), one per
    country changed, note or error, and the figures it decided on."""
    if not decision:
        return []
    story = str(decision.get("story") or "nothing to change")
    sentences = [part.strip() for part in story.split("; ") if part.strip()]
    figures = decision.get("figures") or {}
    if figures.get("desired"):
        sentences.append("slots wanted per country: "
                         + ", ".join(f"{country} {count}" for country, count in sorted(figures["desired"].items())))
    if figures.get("effective_max") is not None:
        sentences.append(f"at most {figures['effective_max']} page slots in all (MAX_PAGE_SLOTS "
                         f"{figures.get('max_page_slots')}, live slot hosts can host {figures.get('live_capacity')})")
    return [sentence[0].upper() + sentence[1:] + ("" if sentence.endswith(".") else ".") for sentence in sentences]


def _jsonable(value: Any) -> Any:
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value


def encode_cursor(object_id: ObjectId) -> str:
    return base64.urlsafe_b64encode(object_id.binary).decode().rstrip("=")


def decode_cursor(cursor: str) -> ObjectId:
    try:
        return ObjectId(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (InvalidId, ValueError, TypeError) as error:
        raise ValueError(f"invalid cursor {cursor!r}") from error


class HarvestViews:
    """The page's figures. ``output_database`` maps a source to the database of its output collection."""

    def __init__(self, client: redis.Redis, database: Database, sources: dict[str, SourceConfig],
                 output_database: Callable[[SourceConfig], Database], settings: HarvesterSettings) -> None:
        self.redis = client
        self.database = database
        self.sources = sources
        self.output_database = output_database
        self.settings = settings

    # -- sources -----------------------------------------------------------------------------------
    def source(self, name: str) -> SourceConfig:
        if name not in self.sources:
            raise UnknownSource(name)
        return self.sources[name]

    def source_summaries(self, only: list[str] | None = None) -> list[SourceSummary]:
        snapshot = read_snapshot(self.redis, self.settings, only=only)
        names = sorted(set(self.sources) | set(snapshot.sources))
        if only is not None:
            names = [name for name in names if name in only]
        last_runs = self._last_runs(names)
        return [self._summary(name, snapshot, last_runs.get(name)) for name in names]

    def source_summary(self, name: str) -> SourceSummary:
        if name not in self.sources and not self.redis.exists(f"harvester:{{{name}}}:config"):
            raise UnknownSource(name)
        return self.source_summaries(only=[name])[0]

    def _summary(self, name: str, snapshot: HarvestSnapshot, last_run: LastRun | None) -> SourceSummary:
        config = self.sources.get(name)
        live: SourceSnapshot | None = snapshot.sources.get(name)
        stats = live.stats if live else None
        health = live.extraction_health if live else {}
        extraction = [AttributeHealth(attribute=attribute, **entry) for attribute, entry in sorted(health.items())]
        return SourceSummary(
            name=name, dag_id=f"harvest_{name}",
            queue=config.queue if config else (live.queue if live else ""),
            render=config.render if config else (live.render if live else ""),
            country=config.country if config else (live.country or None if live else None),
            pending=stats.pending if stats else 0, delayed=stats.delayed if stats else 0,
            active=stats.active if stats else 0,
            max_active=live.max_active if live else (config.rate_limit.max_active if config else 0),
            started_last_minute=stats.admitted_last_minute if stats else 0,
            per_minute=live.per_minute if live else (config.rate_limit.per_minute if config else 0),
            done=stats.done if stats else 0, failed=stats.failed if stats else 0,
            failed_by_reason=live.failures_by_reason() if live else {},
            dead_letters=stats.dead_letters_waiting if stats else 0,
            paused=live.paused if live else False,
            paused_hosts={host: round(until - snapshot.now, 1) for host, until in live.paused_hosts.items()}
            if live else {},
            records_stored=live.outcome("records_stored") if live else 0,
            records_not_modified=live.outcome("records_not_modified") if live else 0,
            pages_blocked=live.outcome("blocked") if live else 0,
            host_unreachable=live.outcome("host_unreachable") if live else 0,
            bytes_saved=live.outcome("bytes_saved") if live else 0,
            hosts=live.hosts.to_dict() if live and live.hosts and live.hosts.hosts > 1 else None,
            drift_threshold=config.drift_threshold if config else 20.0,
            selector_drift=[entry.attribute for entry in extraction if entry.drift],
            extraction=extraction, last_run=last_run,
        )

    def _last_runs(self, names: list[str]) -> dict[str, LastRun]:
        pipeline = [
            {"$match": {"source": {"$in": names}}},
            {"$sort": {"started_at": -1}},
            {"$group": {"_id": "$source", "run": {"$first": "$$ROOT"}}},
        ]
        runs: dict[str, LastRun] = {}
        for group in self.database[RUNS_COLLECTION].aggregate(pipeline):
            run = group["run"]
            report = run.get("report") or {}
            outcome, reason = run_outcome(run)
            runs[group["_id"]] = LastRun(
                run_id=run["run_id"], status=run.get("status", ""), started_at=run.get("started_at"),
                outcome=outcome, outcome_words=RUN_OUTCOME_WORDS[outcome], reason=reason,
                rejected_share=(report.get("shares") or {}).get("rejected"),
                records_stored=report.get("records_stored"), selector_drift=report.get("selector_drift", []))
        return runs

    # -- runs ----------------------------------------------------------------------------------------
    def runs(self, name: str, limit: int = 20) -> list[RunSummary]:
        """The source's runs, newest first, each with its outcome in words; a running one with its progress."""
        self.source(name)
        cursor = self.database[RUNS_COLLECTION].find({"source": name}, {"_id": 0}, sort=[("started_at", -1)],
                                                      limit=min(limit, MAX_PAGE))
        summaries = []
        for run in cursor:
            outcome, reason = run_outcome(run)
            report = run.get("report") or {}
            summaries.append(RunSummary(
                run_id=run["run_id"], status=run.get("status", ""), started_at=run.get("started_at"),
                airflow_run_ids=run.get("airflow_run_ids", []), outcome=outcome,
                outcome_words=RUN_OUTCOME_WORDS[outcome], reason=reason,
                rejected_share=(report.get("shares") or {}).get("rejected"),
                progress=self.run_progress(name, run["run_id"]) if outcome == "running" else None,
                report=_jsonable(run.get("report"))))
        return summaries

    def harvest_run_of(self, name: str, airflow_run_id: str) -> str | None:
        """The harvest run id an Airflow dag run worked on (None before its plan task ran)."""
        run = self.database[RUNS_COLLECTION].find_one({"source": name, "airflow_run_ids": airflow_run_id},
                                                      {"_id": 0, "run_id": 1})
        return run["run_id"] if run else None

    def run_progress(self, name: str, run_id: str) -> RunProgressView:
        config = self.source(name)
        monitor = RunMonitor(self.database, self.output_database(config), self.redis)
        progress = monitor.measure(name, config.output_collection, run_id)
        return RunProgressView(
            **{key: value for key, value in progress.to_dict().items() if key in RunProgressView.model_fields},
            eta=None if progress.eta_seconds is None else format_eta(progress.eta_seconds), line=progress.line())

    # -- slots and dead letters ----------------------------------------------------------------------
    def slots(self) -> SlotsView:
        records = SlotRegistry(self.redis).slots()
        decision = last_decision(self.redis)
        return SlotsView(by_country=slots_by_country_and_state(records),
                         proxy_bytes=proxy_bytes_by_country(self.redis), proxies=proxy_figures(self.redis),
                         last_decision=decision,
                         decision=decision_sentences(decision),
                         decided_at=datetime.fromtimestamp(float(decision["at"]), UTC)
                         if decision and decision.get("at") else None,
                         slots=[{"slot_id": slot.id, "country": slot.country, "state": str(slot.state)}
                                for slot in records])

    def dead_letters(self, name: str, start: int = 0, limit: int = 100) -> DeadLettersView:
        letters = DeadLetters(self.redis)
        listed = letters.list(name, start, min(limit, MAX_PAGE))
        messages = [entry.message if isinstance(entry.message, dict) else {} for entry in listed]
        with_snapshot = self.snapshots().existing(name, [m["task_id"] for m in messages if m.get("task_id")])
        browser = name in self.sources and self.sources[name].render == "browser"  # an HTTP body has no screenshot
        entries = [DeadLetterView(
            index=start + offset, url=message.get("url"), task_id=message.get("task_id"),
            run_id=message.get("run_id"), attempt=message.get("attempt"), reason=entry.reason,
            failed_at=datetime.fromtimestamp(entry.failed_at, UTC), snapshot=message.get("task_id") in with_snapshot,
            screenshot=message.get("task_id") in with_snapshot and browser)
            for offset, (entry, message) in enumerate(zip(listed, messages, strict=True))]
        return DeadLettersView(source=name, total=letters.count(name), entries=entries)

    def run_records(self, name: str, run_id: str, limit: int = 20) -> RunRecordsView:
        """A run's records and its dead letters (each rejection with its evidence link): what the run gave and
        why the rest was refused."""
        config = self.source(name)
        run = self.database[RUNS_COLLECTION].find_one({"source": name, "run_id": run_id}, {"_id": 0}) or {}
        outcome, reason = run_outcome(run) if run else ("running", "no such run")
        page = self.results(name, limit=limit, run_id=run_id)
        stored = self.output_database(config)[config.output_collection].count_documents({"run_id": run_id})
        letters = [entry for entry in self.dead_letters(name, 0, MAX_PAGE).entries if entry.run_id == run_id]
        report = run.get("report") or {}
        return RunRecordsView(source=name, run_id=run_id, outcome=outcome, outcome_words=RUN_OUTCOME_WORDS[outcome],
                              reason=reason, records=page.records, records_stored=stored, rejections=letters[:limit],
                              rejections_by_attribute=report.get("rejections") or {})

    def snapshots(self) -> SnapshotStore:
        return SnapshotStore(self.database, self.settings.browser_snapshot_keep_days,
                             self.settings.browser_snapshot_max_bytes)

    def snapshot(self, name: str, task_id: str) -> PageSnapshot | None:
        """The kept snapshot of a dead letter's page (None when there is none, or it expired)."""
        return self.snapshots().get(name, task_id)

    def requeue(self, name: str, limit: int | None = None) -> RequeueResult:
        letters = DeadLetters(self.redis)
        moved = letters.requeue(name, limit)
        return RequeueResult(source=name, requeued=moved, remaining=letters.count(name))

    # -- results -------------------------------------------------------------------------------------
    def export(self, name: str, fmt: str, run_id: str | None = None, since: datetime | None = None,
               changed_only: bool = False, gone: bool | None = None,
               escape_formulas: bool = True) -> tuple[str, int]:
        """The records as a ``fmt`` file (jsonl, csv, parquet) in a temporary file, and how many: the download
        of ``harvester export``. The caller streams the file, then deletes it."""
        return export_to_temporary_file(self.source(name), self.output_database(self.source(name)), self.database,
                                        fmt, run_id, since, changed_only, gone, escape_formulas)

    def results(self, name: str, cursor: str | None = None, limit: int = 50, run_id: str | None = None,
                harvested_after: datetime | None = None, harvested_before: datetime | None = None,
                gone: bool | None = None) -> ResultsPage:
        """Records oldest first (by _id), ``limit`` at a time; the cursor is the last _id seen. ``gone``: only
        the records of gone items (True), only the others (False)."""
        from harvester.storage import gone_filter

        config = self.source(name)
        query: dict[str, Any] = gone_filter(gone)
        if run_id is not None:
            query["run_id"] = run_id
        window = {}
        if harvested_after is not None:
            window["$gte"] = harvested_after
        if harvested_before is not None:
            window["$lt"] = harvested_before
        if window:
            query["harvested_at"] = window
        if cursor:
            query["_id"] = {"$gt": decode_cursor(cursor)}
        limit = max(1, min(limit, MAX_PAGE))
        documents = list(self.output_database(config)[config.output_collection].find(
            query, sort=[("_id", 1)], limit=limit + 1))
        more = len(documents) > limit
        documents = documents[:limit]
        next_cursor = encode_cursor(documents[-1]["_id"]) if more else None
        records = [_jsonable({key: value for key, value in document.items() if key != "_id"})
                   for document in documents]
        return ResultsPage(source=name, records=records, next_cursor=next_cursor)




def export_to_temporary_file(source: SourceConfig, output_database: Database, runs_database: Database, fmt: str,
                             run_id: str | None, since: datetime | None, changed_only: bool,
                             gone: bool | None = None, escape_formulas: bool = True) -> tuple[str, int]:
    """Write an export into a temporary file (spooled to disk, so memory stays flat); (its path, records)."""
    import os
    import tempfile

    from harvester.storage import export_query, export_records

    query = export_query(runs_database, source, run_id, since, changed_only, gone)
    handle, path = tempfile.mkstemp(prefix=f"harvester-{source.name}-", suffix=f".{fmt}")
    try:
        with os.fdopen(handle, "wb") as out:
            count = export_records(source, output_database[source.output_collection], fmt, out,
                                   query, escape_formulas=escape_formulas)
    except BaseException:  # the file is removed whatever went wrong, then the error goes on
        os.unlink(path)
        raise
    return path, count
