"""Airflow adapter of the producer: plan -> produce -> wait_for_harvest -> report in a source's DAG.

The logic lives in planner / producer / progress; this module only wires tasks. Connection ids
(``mongo_default``, the source's ``input.mongo.connection_id`` and ``output.connection_id``,
``redis_default``) resolve through :mod:`harvester.connections`, which inside Airflow asks MongoHook
/ BaseHook first and falls back to ``HARVESTER_MONGO_URI`` / ``HARVESTER_REDIS_URL`` when the
connection does not exist (``airflow dags test``, a bare machine). An unreachable MongoDB fails the
task with one clear line, and the DAG's retries apply; nothing is half-written because package
creation is idempotent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseSensorOperator

from harvester.airflow.assets import asset_event_extra, output_asset
from harvester.config import REEXTRACT_RUN_PARAM, REEXTRACT_SINCE_PARAM, SourceConfig
from harvester.connections import (
    MONGO_DEFAULT,
    REDIS_DEFAULT,
    MongoTarget,
    MongoUnavailableError,
    clear_mongo_errors,
    mongo_client_for,
    redis_client,
    resolve_mongo,
)
from harvester.settings import HarvesterSettings, get_settings

if TYPE_CHECKING:  # pymongo and redis load at run time only: DAG files import this module on every parse
    import pymongo.database
    import redis

    from harvester.producer import RunSettlement
    from harvester.scraping import RobotsCache

log = logging.getLogger(__name__)

__all__ = [
    "HarvestSensor", "MongoUnavailableError", "PlanOperator", "ProduceOperator", "ReportOperator",
    "add_producer_tasks", "output_asset", "plan_run", "produce_run", "report_run",
]


def output_database_name(source: SourceConfig, settings: HarvesterSettings) -> str:
    return source.output.database or settings.mongo_database


class _Connections:
    """The targets one task needs; clients come from the factory (cached per process, never closed here)."""

    def __init__(self, source: SourceConfig, settings: HarvesterSettings) -> None:
        self.settings = settings
        self.main = resolve_mongo(MONGO_DEFAULT, settings)
        self.output = resolve_mongo(source.output.connection_id, settings)
        self.input = resolve_mongo(source.input.mongo.connection_id, settings) if source.input.mongo else None

    def database(self, target: MongoTarget, name: str) -> pymongo.database.Database:
        return mongo_client_for(target, self.settings)[name]

    @property
    def redis(self) -> redis.Redis:
        return redis_client(REDIS_DEFAULT, settings=self.settings)


@contextlib.contextmanager
def _connections(source: SourceConfig) -> Iterator[_Connections]:
    connections = _Connections(source, get_settings())
    with clear_mongo_errors(connections.main):
        yield connections


def plan_run(source: SourceConfig, airflow_run_id: str, params: dict[str, Any] | None) -> dict[str, Any]:
    from harvester.producer import Planner, PlanOptions

    options = PlanOptions.for_source(source, params)
    with _connections(source) as connections:
        settings = connections.settings
        input_database = None
        if connections.input is not None and source.input.mongo is not None:
            input_database = connections.database(connections.input,
                                                  source.input.mongo.database or settings.mongo_database)
        planner = Planner(
            connections.database(connections.main, settings.mongo_database), input_database,
            connections.database(connections.output, output_database_name(source, settings)),
            robots=_robots_cache(settings), user_agent=settings.user_agent,
        )
        result = planner.plan(source, airflow_run_id, options)
    log.info("planned run %s of %s: %s URLs in %s packages (%s new); skipped %s fresh, %s invalid; "
             "batch limit reached: %s", result.run_id, source.name, result.urls_planned, result.packages_total,
             result.packages_created, result.skipped_fresh, result.skipped_invalid, result.batch_limit_reached)
    return result.to_dict()


def reextract_run(source: SourceConfig, params: dict[str, Any]) -> dict[str, Any]:
    """The trigger form's re-extraction (``reextract_since`` or ``reextract_run``): the current config over the
    archive, as a run of its own; no request reaches the site, so the run is over when this returns."""
    from harvester.config import parse_duration
    from harvester.producer import Reextraction

    since = parse_duration(params[REEXTRACT_SINCE_PARAM]) if params.get(REEXTRACT_SINCE_PARAM) else None
    report = Reextraction.from_settings(get_settings()).run(source, params.get(REEXTRACT_RUN_PARAM) or None, since)
    log.info("re-extraction %s of %s: %s archived pages read, %s records stored (%s changed), 0 requests",
             report["run_id"], source.name, report.get("pages_read", 0), report.get("records_stored", 0),
             report.get("records_changed", 0))
    return {"run_id": report["run_id"], "reextraction": report}


def _robots_cache(settings: HarvesterSettings) -> RobotsCache:
    """The workers' robots.txt cache in Redis: planning drops URLs a cached robots.txt disallows."""
    from harvester.connections import REDIS_DEFAULT, redis_client
    from harvester.scraping import RobotsCache

    return RobotsCache.from_settings(settings, redis_client(REDIS_DEFAULT, settings=settings))


def produce_run(source: SourceConfig, run_id: str) -> dict[str, Any]:
    from harvester.producer import Producer
    from harvester.storage import RunStore

    with _connections(source) as connections:
        settings = connections.settings
        database = connections.database(connections.main, settings.mongo_database)
        producer = Producer.from_settings(settings, database, connections.redis)
        result = producer.produce(source, run_id)
        RunStore(database).record_produce(source.name, run_id, result.to_dict())
    log.info("run %s of %s: claimed %s packages, pushed %s tasks to intake (%s stale packages resumed)",
             run_id, source.name, result.packages_claimed, result.tasks_pushed, result.packages_reset)
    return result.to_dict()


def _settlement(source: SourceConfig, connections: _Connections) -> RunSettlement:
    from harvester.producer import RunSettlement

    settings = connections.settings
    return RunSettlement(connections.database(connections.main, settings.mongo_database),
                         connections.database(connections.output, output_database_name(source, settings)),
                         connections.redis)


def report_run(source: SourceConfig, run_id: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's report, with its outcome against the source's quality thresholds (a trigger's params over
    them); the caller fails the task on a ``failed`` outcome."""
    from harvester.config import RunOptions

    quality = RunOptions.for_run(source, params).quality
    unit = "records" if source.listing is not None and source.listing.records is not None else "pages"
    with _connections(source) as connections:
        report = _settlement(source, connections).report(
            source.name, source.output_collection, run_id, attributes=source.record_attributes,
            drift_threshold=source.drift_threshold, quality=quality, unit=unit)
    if report.get("selector_drift"):
        log.warning("selector drift in run %s of %s: %s (share of records down by at least %s points from the "
                    "median of previous runs)", run_id, source.name, ", ".join(report["selector_drift"]),
                    source.drift_threshold)
    if report.get("links_cut"):
        log.warning("run %s of %s stopped at its bounds: %s links not followed (listing.max_depth, max_new_urls, "
                    "the listing-page caps: raise them to read more)", run_id, source.name,
                    ", ".join(f"{reason} {count}" for reason, count in sorted(report["links_cut"].items())))
    log.info("report of run %s of %s: %s", run_id, source.name,
             ", ".join(f"{key}={value}" for key, value in report.items()))
    outcome = report["quality"]
    if outcome["outcome"] != "green":
        log.warning("run %s of %s is %s: %s", run_id, source.name, outcome["outcome"], outcome["reason"])
    if source.output.archive.enabled:
        expire_source_archive(source)
    return report


def expire_source_archive(source: SourceConfig) -> None:
    """The archive's clean-up, after each run's report (daily for a daily source): files and index rows past
    ``output.archive.keep``, by Redis's clock. One that fails is logged and tried again after the next run."""
    from datetime import UTC, datetime

    from harvester.errors import StorageError, redis_storage_errors
    from harvester.storage import ArchivedDigests, ArchiveIndex, expire_archive

    settings = get_settings()
    try:
        with _connections(source) as connections:
            with redis_storage_errors():
                seconds, microseconds = connections.redis.time()
            now = datetime.fromtimestamp(seconds + microseconds / 1e6, UTC)
            index = ArchiveIndex(connections.database(connections.main, settings.mongo_database))
            expired = expire_archive(source, index, settings.archive_location, now,
                                     ArchivedDigests(connections.redis, index, settings.archive_digest_filter_bits))
    except StorageError as error:  # the archive's own failure, or MongoDB's: never the run's outcome
        log.warning("the archive clean-up of %s failed (tried again after the next run): %s", source.name, error)
        return
    if expired.files or expired.rows:
        log.info("archive of %s: %d files and %d index rows past keep=%s deleted (%d rows of files gone from "
                 "storage)", source.name, expired.files, expired.rows, source.output.archive.keep, expired.missing)


SENSOR_MIN_RETRIES = 1


class HarvestSensor(BaseSensorOperator):
    """Waits until every package of the run is finished or dead; deferred to the triggerer by default."""

    def __init__(self, *, source: SourceConfig, plan_task_id: str = "plan", deferrable: bool = True,
                 **kwargs: Any) -> None:
        settings = get_settings()
        kwargs.setdefault("timeout", settings.producer_wait_timeout_seconds)
        kwargs.setdefault("poke_interval", settings.producer_poll_seconds)
        super().__init__(**kwargs)
        self.source = source
        self.plan_task_id = plan_task_id
        self.deferrable = deferrable

    def _run_id(self, context: Any) -> str:
        plan = context["ti"].xcom_pull(task_ids=self.plan_task_id)
        return str(plan["run_id"])

    def poke(self, context: Any) -> bool:
        if context["ti"].xcom_pull(task_ids=self.plan_task_id).get("reextraction") is not None:
            return True  # a re-extraction is done when planned: no task went to the workers
        run_id = self._run_id(context)
        with _connections(self.source) as connections:
            progress = _settlement(self.source, connections).settle_and_measure(
                self.source.name, self.source.output_collection, run_id)
        self.log.info("%s", progress.line())
        return progress.complete

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        from harvester.airflow.triggers import HarvestProgressTrigger

        settings = get_settings()
        self.defer(
            trigger=HarvestProgressTrigger(
                source=self.source.name, run_id=self._run_id(context),
                output_collection=self.source.output_collection,
                mongo_connection_id=MONGO_DEFAULT, database=settings.mongo_database,
                output_connection_id=self.source.output.connection_id,
                output_database=output_database_name(self.source, settings),
                redis_connection_id=REDIS_DEFAULT, poll_seconds=float(self.poke_interval),
                deadline=time.time() + float(self.timeout),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + 5 * float(self.poke_interval)),
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        progress = event.get("progress", {})
        if event.get("status") != "complete":
            from airflow.sdk.exceptions import AirflowSensorTimeout

            raise AirflowSensorTimeout(
                f"run {progress.get('run_id')} of {self.source.name} did not finish within {self.timeout:.0f} s: "
                f"{progress.get('packages_finished')}/{progress.get('packages_total')} packages finished"
            )
        self.log.info("run %s of %s: every package is finished", progress.get("run_id"), self.source.name)
        return progress


class PlanOperator(BaseOperator):
    """Read the input, skip fresh URLs, and write this run's packages (up to the batch limit)."""

    ui_color = "#e8f4fd"

    def __init__(self, *, source: SourceConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source

    def execute(self, context: Any) -> dict[str, Any]:
        params = context.get("params") or {}
        if params.get(REEXTRACT_SINCE_PARAM) or params.get(REEXTRACT_RUN_PARAM):
            return reextract_run(self.source, params)
        return plan_run(self.source, context["run_id"], params)


class _AfterPlanOperator(BaseOperator):
    """A step that works on the harvest run the ``plan`` task chose (read from its XCom)."""

    def __init__(self, *, source: SourceConfig, plan_task_id: str = "plan", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.plan_task_id = plan_task_id

    def planned_run_id(self, context: Any) -> str:
        return str(context["ti"].xcom_pull(task_ids=self.plan_task_id)["run_id"])

    def reextraction(self, context: Any) -> dict[str, Any] | None:
        """The re-extraction's report when the ``plan`` task ran one instead of planning a harvest."""
        return context["ti"].xcom_pull(task_ids=self.plan_task_id).get("reextraction")


class ProduceOperator(_AfterPlanOperator):
    """Claim waiting packages and push their tasks into the distributor intake."""

    ui_color = "#fdf3e8"

    def execute(self, context: Any) -> dict[str, Any]:
        if self.reextraction(context) is not None:  # nothing to fetch: the pages came from the archive
            return {"run_id": self.planned_run_id(context), "tasks_pushed": 0}
        return produce_run(self.source, self.planned_run_id(context))


class ReportOperator(_AfterPlanOperator):
    """The run's figures, returned (XCom), logged and stored in the runs collection; a run whose data breached
    the source's quality thresholds fails here with the reason in one line (unless ``on_breach: warn``)."""

    ui_color = "#e9fde8"

    def execute(self, context: Any) -> dict[str, Any]:
        report = self.reextraction(context) or report_run(self.source, self.planned_run_id(context),
                                                          context.get("params"))
        quality = report["quality"]
        if quality["outcome"] == "failed":  # the harvest is over: a retry would report the same data again
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"run {report['run_id']} of {self.source.name} breached its quality: "
                                       f"{quality['reason']}")
        for outlet in self.outlets:  # the Asset event carries the run's figures for downstream DAGs
            context["outlet_events"][outlet].extra = asset_event_extra(self.source, report)
        return report


def add_producer_tasks(source: SourceConfig) -> None:
    """Add plan -> produce -> wait_for_harvest -> report to the DAG being declared (inside its ``with DAG``).

    Plain operator classes rather than @task functions: a DAG file declares hundreds of sources and
    TaskFlow's per-task signature inspection doubled the parse time.
    """
    plan = PlanOperator(task_id="plan", source=source)
    produce = ProduceOperator(task_id="produce", source=source)
    # it only waits: retried once at least, so an Airflow race that fails it (the executor's late word on the
    # deferral, "TI is no longer in the running state") never fails a harvest whose pages are done
    wait = HarvestSensor(task_id="wait_for_harvest", source=source, retries=max(SENSOR_MIN_RETRIES, source.retries))
    report = ReportOperator(task_id="report", source=source, outlets=[output_asset(source, get_settings())])
    plan >> produce >> wait >> report
