"""The Airflow Asset of a source's output, its events' figures, and scheduling a source after others.

The Asset names the real output, never a connection id posing as a host (OpenLineage reads a URI's
host as a server): ``harvester://<database>/<collection>``, with ``?connection=<id>`` when the output is
not on ``mongo_default`` (two servers may hold a database of the same name). Resolving the connection
to its host would be I/O at parse time, which DAG files must not do.

Each run's ``report`` task emits an event of it whose ``extra`` carries the run's figures (new,
changed, unchanged, not modified, rejected, records stored, failures), so a downstream DAG (or a
person in the Assets view) sees what the run changed. ``schedule: {after: [listing_source]}`` makes a
source's DAG scheduled on those sources' Assets: Airflow starts it once each has had an event since
its last run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import Asset

from harvester.config import AfterSchedule, SourceConfig
from harvester.connections import MONGO_DEFAULT
from harvester.settings import HarvesterSettings

__all__ = ["EVENT_FIGURES", "asset_event_extra", "output_asset", "schedule_of"]

# The report's figures an Asset event carries (names as in the report).
EVENT_FIGURES = ("records_stored", "records_new", "records_changed", "records_unchanged", "records_not_modified",
                 "rejected", "tasks_failed", "urls_planned", "bytes_saved", "duration_seconds")


def output_asset(source: SourceConfig, settings: HarvesterSettings) -> Asset:
    """The Airflow Asset of a source's output collection: downstream DAGs schedule on it."""
    database = source.output.database or settings.mongo_database
    collection = source.output_collection
    connection = source.output.connection_id
    if connection == MONGO_DEFAULT:
        return Asset(name=f"{database}.{collection}", uri=f"harvester://{database}/{collection}")
    return Asset(name=f"{connection}:{database}.{collection}",
                 uri=f"harvester://{database}/{collection}?connection={connection}")


def schedule_of(source: SourceConfig, upstream: Callable[[str], SourceConfig | None],
                settings: HarvesterSettings) -> Any:
    """What the DAG's ``schedule`` is: the source's cron or preset, or the Assets of the sources it runs after
    (an upstream that cannot be found schedules nothing: the loader reports it as this file's problem)."""
    if not isinstance(source.schedule, AfterSchedule):
        return source.schedule
    assets = [output_asset(found, settings) for name in source.schedule.after if (found := upstream(name))]
    return assets or None


def asset_event_extra(source: SourceConfig, report: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of a run's report that its Asset event carries (JSON values only)."""
    extra: dict[str, Any] = {"source": source.name, "run_id": report.get("run_id")}
    rejected = (report.get("failures_by_reason") or {}).get("record rejected", 0)
    for name in EVENT_FIGURES:
        value = rejected if name == "rejected" else report.get(name)
        if value is not None:
            extra[name] = value
    return extra
