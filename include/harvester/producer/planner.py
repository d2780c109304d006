"""Plan a run: stream a source's input URLs into packages, skipping fresh URLs, up to the batch limit.

The input is read with a cursor and handled in chunks, so memory does not grow with the input.
Harvesting lag: a URL is due unless the source's OUTPUT collection holds a record with that ``url``
whose ``harvested_at`` is within ``source.harvesting_lag``. The output collection is the authority
(it is what was really stored); it is queried once per chunk with ``$in``. Listing-page inputs are
never stored as records, so they are always due.

Planning is resumable: packages are created through a unique index, the run document records when
planning finished, and a plan that died half-way continues after the packages it already made.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pymongo.collection import Collection
from pymongo.database import Database

from harvester.config import RunOptions, SourceConfig
from harvester.producer.sitemaps import plan_sitemaps
from harvester.producer.streams import prefetch
from harvester.scraping import RobotsCache
from harvester.storage import PackageStore, RunStore
from harvester.urls import DEFAULT_SESSION_IDS, SessionIds, canonicalise_url

log = logging.getLogger(__name__)

LAG_CHUNK = 1000  # URLs per $in query against the output collection
INSERT_CHUNK_TASKS = 5000  # planned tasks per insert_many of packages
INVALID_EXAMPLES = 5
PROGRESS_LOG_SECONDS = 10.0  # planning a large input logs its progress this often


@dataclass(frozen=True)
class PlanOptions:
    """What a run plans; a manual trigger may override the source's batch and give URLs to harvest now."""

    batch_size: int
    max_packages: int
    urls: list[str] | None = None
    kind: Literal["listing", "details"] | None = None

    @classmethod
    def for_source(cls, source: SourceConfig, params: Mapping[str, Any] | None = None) -> PlanOptions:
        """The source's batch settings, overridden by a manual trigger's params (validated by RunOptions).
        ``detail_urls`` are planned as detail pages whatever the source starts from (harvest these items again
        now, on a listing source too); ``urls`` as the source's input kind."""
        options = RunOptions.for_run(source, params)
        if options.detail_urls:
            return cls(batch_size=options.batch_size, max_packages=options.max_packages, urls=options.detail_urls,
                       kind="details")
        return cls(batch_size=options.batch_size, max_packages=options.max_packages, urls=options.urls or None)


@dataclass
class PlanResult:
    """Figures of the plan step (also stored in the run document)."""

    source: str
    run_id: str
    urls_read: int = 0
    urls_planned: int = 0
    skipped_fresh: int = 0
    skipped_invalid: int = 0
    skipped_duplicate: int = 0
    skipped_robots: int = 0
    sitemaps_planned: int = 0
    invalid_examples: list[str] = field(default_factory=list)
    packages_created: int = 0
    packages_total: int = 0
    batch_limit_reached: bool = False
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_HTTP_URL = re.compile(r"(?i:https?)://(?:[^\s/?#@]+@)?[^\s/?#:@]+(?::\d{1,5})?(?:[/?#]\S*)?")


# Where a first request of ``input.requests`` came from: its key is canonical already (a URL and a digest)
REQUEST_ORIGIN = "input.requests"


def valid_url(value: Any, session_ids: SessionIds = DEFAULT_SESSION_IDS) -> str | None:
    """The URL in its canonical form (:mod:`harvester.urls`), when it is an absolute http(s) URL with a
    host and no whitespace; else None.

    Records are stored under the canonical URL, so the harvesting-lag lookup must use it too: an input
    URL written differently (``HTTP://Shop:80/p?utm_source=x``) is then still found fresh. The regular
    expression turns most bad input away before the dearer canonicalisation.
    """
    if not isinstance(value, str):
        return None
    url = value.strip()
    return canonicalise_url(url, session_ids=session_ids) if _HTTP_URL.fullmatch(url) else None


def _dotted(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _cursor_batches(collection: Collection, query: dict[str, Any], projection: dict[str, Any], batch_size: int
                    ) -> Iterator[list[dict[str, Any]]]:
    with collection.find(query, projection, batch_size=batch_size) as cursor:
        batch: list[dict[str, Any]] = []
        for document in cursor:
            batch.append(document)
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch


class PlanProgressLog:
    """A line every ``PROGRESS_LOG_SECONDS`` while a large input is planned, so its task log shows it moving."""

    def __init__(self, source: str, run_id: str) -> None:
        self.source, self.run_id = source, run_id
        self.started = time.monotonic()
        self.last = self.started
        self.logged = False

    def maybe_log(self, result: PlanResult, packages_made: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_LOG_SECONDS:
            return
        self.last, self.logged = now, True
        elapsed = now - self.started
        log.info("planning %s %s: %d URLs read (%.0f/s), %d packages, %d fresh and %d invalid skipped so far",
                 self.source, self.run_id, result.urls_read, result.urls_read / elapsed if elapsed else 0.0,
                 packages_made, result.skipped_fresh, result.skipped_invalid)

    def finished(self, result: PlanResult) -> None:
        if self.logged:
            log.info("planning %s %s: done, %d URLs read in %.1fs", self.source, self.run_id, result.urls_read,
                     time.monotonic() - self.started)


class PackageBuilder:
    """Due URLs into packages of ``batch_size``, written ``INSERT_CHUNK_TASKS`` tasks at a time, until ``room``
    packages are made (the batch limit)."""

    def __init__(self, packages: PackageStore, source: str, run_id: str, kind: str, batch_size: int,
                 next_package_id: int, room: int, refetch: bool = False) -> None:
        self.packages, self.source, self.run_id, self.kind = packages, source, run_id, kind
        self.refetch = refetch  # pages a manual trigger named: fetched in full, whatever validators are stored
        self.batch_size, self.next_package_id, self.room = batch_size, next_package_id, room
        self.packages_made = 0
        self.current: list[str] = []
        self.ready: list[tuple[int, list[str]]] = []
        self.ready_tasks = 0

    def add(self, chunk: Iterable[str], already_planned: set[str], result: PlanResult) -> bool:
        """Plan a chunk of due URLs; False once the batch limit is reached."""
        for url in chunk:
            if url in already_planned:
                result.skipped_duplicate += 1
                continue
            if self.packages_made >= self.room:
                result.batch_limit_reached = True
                return False
            self.current.append(url)
            if len(self.current) >= self.batch_size:
                self._close_package(result)
                self.packages_made += 1
                if self.ready_tasks >= INSERT_CHUNK_TASKS:
                    self._write(result)
        return True

    def finish(self, result: PlanResult) -> None:
        """The last, partial package (within the limit), then everything not written yet."""
        if self.current and self.packages_made < self.room:
            self._close_package(result)
        self._write(result)

    def _close_package(self, result: PlanResult) -> None:
        self.ready.append((self.next_package_id, self.current))
        self.ready_tasks += len(self.current)
        result.urls_planned += len(self.current)
        self.next_package_id += 1
        self.current = []

    def _write(self, result: PlanResult) -> None:
        result.packages_created += self.packages.create_packages(self.source, self.run_id, self.ready, self.kind,
                                                                 refetch=self.refetch)
        self.ready, self.ready_tasks = [], 0


class Planner:
    """Builds the packages of one run from seeds, a MongoDB input collection, or explicit URLs."""

    def __init__(self, database: Database, input_database: Database | None, output_database: Database,
                 cursor_batch_size: int = 2000, robots: RobotsCache | None = None, user_agent: str = "") -> None:
        self.robots = robots  # cached robots.txt only (never fetched here); the fetch-time check still applies
        self.user_agent = user_agent
        self.packages = PackageStore(database)
        self.runs = RunStore(database)
        self.input_database = input_database
        self.output_database = output_database
        self.cursor_batch_size = cursor_batch_size

    def plan(self, source: SourceConfig, airflow_run_id: str, options: PlanOptions, now: datetime | None = None
             ) -> PlanResult:
        """Plan the harvest run of this Airflow run: a new one, or the unfinished one it continues.

        A run that never reported (it died, or its DAG run failed) is continued by the next run of the
        source, whatever its Airflow run id: its finished packages are kept, the rest resumes. A
        manual run with explicit URLs always starts its own harvest run.
        """
        now = now or datetime.now(UTC)
        run_id = self._open_run(source, airflow_run_id, options, now)
        previous = self.runs.get(source.name, run_id)
        if previous and previous.get("plan"):
            log.info("run %s of %s was planned already; keeping its %s packages",
                     run_id, source.name, previous["plan"]["packages_total"])
            return PlanResult(**{**previous["plan"], "resumed": True})

        result = PlanResult(source=source.name, run_id=run_id)
        already_planned, next_package_id = self._resume_point(source, run_id, result)
        if not result.resumed and options.urls is None:  # sitemaps first: a half-done plan made them
            result.sitemaps_planned, next_package_id = plan_sitemaps(self.packages, source, run_id, next_package_id,
                                                                     options.batch_size)
            result.packages_created, result.urls_planned = next_package_id, result.sitemaps_planned
        kind = options.kind or source.input.kind
        check_lag = options.urls is None and kind == "details" and source.harvesting_lag > timedelta(0)
        cutoff = now - source.harvesting_lag
        if check_lag and self._nothing_harvested_since(source, cutoff):
            check_lag = False  # no record is younger than the lag: no URL can be fresh, skip the lookups
        builder = PackageBuilder(self.packages, source.name, run_id, kind, options.batch_size, next_package_id,
                                 room=options.max_packages - next_package_id, refetch=options.urls is not None)
        # Reading, validating and lag-checking run one chunk ahead in a thread while this one writes
        # packages: both wait on MongoDB, so overlapping them is most of the planner's speed.
        due = prefetch(self._due_chunks(source, options, result, check_lag, cutoff), ahead=1)
        progress = PlanProgressLog(source.name, run_id)
        try:
            for chunk in due:
                progress.maybe_log(result, builder.packages_made)
                if not builder.add(chunk, already_planned, result):
                    break  # the batch limit is reached
        finally:
            due.close()
        builder.finish(result)
        result.packages_total = builder.next_package_id
        result.urls_planned += len(already_planned)
        if result.skipped_invalid:
            log.warning("skipped %s input documents without a valid URL, e.g. %s",
                        result.skipped_invalid, "; ".join(result.invalid_examples))
        progress.finished(result)
        self.runs.finish_plan(source.name, run_id, result.to_dict())
        return result

    def _open_run(self, source: SourceConfig, airflow_run_id: str, options: PlanOptions, now: datetime) -> str:
        """The harvest run this Airflow run works on (its own, or an unfinished one it adopts), started."""
        self.packages.ensure_indexes()
        self.runs.ensure_indexes()
        run_id = airflow_run_id
        if own := self.runs.of_airflow_run(source.name, airflow_run_id):
            run_id = own["run_id"]  # a cleared or retried task of a run that already planned (or adopted)
        elif options.urls is None and (unfinished := self.runs.find_open(source.name, airflow_run_id)):
            run_id = unfinished["run_id"]
            log.info("continuing the unfinished run %s of %s (started %s)", run_id, source.name,
                     unfinished.get("started_at"))
        self.runs.start(source.name, run_id, now)
        self.runs.adopt(source.name, run_id, airflow_run_id)
        return run_id

    def _resume_point(self, source: SourceConfig, run_id: str, result: PlanResult) -> tuple[set[str], int]:
        """(URLs already planned, the next package id): a plan that died half-way continues after what it made."""
        last = self.packages.last_package_id(source.name, run_id)
        if last is None:
            return set(), 0
        result.resumed = True
        already_planned = self.packages.planned_urls(source.name, run_id)
        log.info("continuing a half-done plan of run %s: %s packages, %s URLs already planned",
                 run_id, last + 1, len(already_planned))
        return already_planned, last + 1

    # Input ----------------------------------------------------------------------------------

    def _raw_urls(self, source: SourceConfig, options: PlanOptions) -> Iterator[tuple[Any, Any]]:
        """(where it came from, raw value) pairs, streamed. For input documents "where" is the document
        itself: formatting its _id costs more than the rest of planning, so only bad input gets it."""
        if options.urls is not None:
            for index, url in enumerate(options.urls):
                yield f"params.urls[{index}]", url
            return
        for index, url in enumerate(source.input.seeds):
            yield f"input.seeds[{index}]", url
        for seed in source.input.requests:  # packages hold a request's key (its URL and its body's digest)
            yield REQUEST_ORIGIN, seed.key
        mongo = source.input.mongo
        if mongo is None:
            return
        if self.input_database is None:
            raise ValueError(f"source {source.name} reads input from MongoDB but no input database was given")
        collection = self.input_database[mongo.collection]
        # The server builds the next batches while this thread plans the current one.
        batches = _cursor_batches(collection, mongo.filter, {mongo.url_field: 1}, self.cursor_batch_size)
        field = mongo.url_field
        nested = "." in field
        for batch in prefetch(batches, ahead=2):
            for document in batch:
                yield document, (_dotted(document, field) if nested else document.get(field))

    def _valid_chunks(self, source: SourceConfig, options: PlanOptions, result: PlanResult) -> Iterator[list[str]]:
        chunk: dict[str, None] = {}
        for origin, raw in self._raw_urls(source, options):
            result.urls_read += 1
            url = raw if origin == REQUEST_ORIGIN else valid_url(raw, source.session_ids.rules)
            if url is None:
                result.skipped_invalid += 1
                if len(result.invalid_examples) < INVALID_EXAMPLES:
                    where = f"_id={origin.get('_id')!r}" if isinstance(origin, dict) else origin
                    result.invalid_examples.append(f"{where}: {raw!r}"[:200])
                continue
            if url in chunk:
                result.skipped_duplicate += 1
                continue
            chunk[url] = None
            if len(chunk) >= LAG_CHUNK:
                yield self._robots_allowed(source, list(chunk), result)
                chunk = {}
        if chunk:
            yield self._robots_allowed(source, list(chunk), result)

    def _robots_allowed(self, source: SourceConfig, urls: list[str], result: PlanResult) -> list[str]:
        if self.robots is None or source.robots != "obey":
            return urls
        kept, result_dropped = self.robots.filter_allowed(urls, source.headers.get("User-Agent") or self.user_agent)
        result.skipped_robots += result_dropped
        return kept

    def _nothing_harvested_since(self, source: SourceConfig, cutoff: datetime) -> bool:
        """One query instead of one $in lookup per chunk when the whole output is older than the lag
        (a source's first run, or every run after a pause longer than its lag)."""
        output = self.output_database[source.output_collection]
        return output.find_one({"harvested_at": {"$gte": cutoff}}, {"_id": 1}) is None

    def _due_chunks(self, source: SourceConfig, options: PlanOptions, result: PlanResult, check_lag: bool,
                    cutoff: datetime) -> Iterable[list[str]]:
        output = self.output_database[source.output_collection]
        for chunk in self._valid_chunks(source, options, result):
            if check_lag:
                fresh = {
                    document["url"]
                    for document in output.find(
                        {"url": {"$in": chunk}, "harvested_at": {"$gte": cutoff}}, {"url": 1, "_id": 0}
                    )
                }
                if fresh:
                    result.skipped_fresh += len(fresh)
                    chunk = [url for url in chunk if url not in fresh]
            yield chunk
