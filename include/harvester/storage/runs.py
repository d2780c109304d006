"""The ``runs`` collection: one document per (source, run) with the figures of each step.

It is how a re-run knows that planning already finished, and where the report lands for people and
for downstream jobs that do not read Airflow's XComs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING
from pymongo.collection import Collection
from pymongo.database import Database

from harvester.errors import mongo_storage_errors

RUNS_COLLECTION = "runs"


class RunStore:
    def __init__(self, database: Database) -> None:
        self.collection: Collection = database[RUNS_COLLECTION]

    @mongo_storage_errors()
    def ensure_indexes(self) -> None:
        self.collection.create_index([("source", ASCENDING), ("run_id", ASCENDING)], unique=True, name="source_run")

    @mongo_storage_errors()
    def get(self, source: str, run_id: str) -> dict[str, Any] | None:
        return self.collection.find_one({"source": source, "run_id": run_id}, {"_id": 0})

    @mongo_storage_errors()
    def of_airflow_run(self, source: str, airflow_run_id: str) -> dict[str, Any] | None:
        """The harvest run an Airflow run already worked on (a cleared task instance comes back to it)."""
        return self.collection.find_one({"source": source, "airflow_run_ids": airflow_run_id}, {"_id": 0})

    @mongo_storage_errors()
    def find_open(self, source: str, exclude_run_id: str) -> dict[str, Any] | None:
        """The latest earlier run of the source that never reported: a new run continues it."""
        return self.collection.find_one(
            {"source": source, "run_id": {"$ne": exclude_run_id}, "status": {"$ne": "reported"}},
            {"_id": 0}, sort=[("started_at", -1)],
        )

    @mongo_storage_errors()
    def adopt(self, source: str, run_id: str, airflow_run_id: str) -> None:
        """Remember which Airflow runs worked on a harvest run (a re-run continues an unfinished one)."""
        self.collection.update_one({"source": source, "run_id": run_id},
                                   {"$addToSet": {"airflow_run_ids": airflow_run_id}})

    @mongo_storage_errors()
    def start(self, source: str, run_id: str, now: datetime) -> None:
        """Record the run's start once; a re-run keeps the first start so the duration stays honest."""
        self.collection.update_one(
            {"source": source, "run_id": run_id},
            {"$setOnInsert": {"started_at": now, "status": "planning"}},
            upsert=True,
        )

    @mongo_storage_errors()
    def finish_plan(self, source: str, run_id: str, plan: dict[str, Any]) -> None:
        self._set(source, run_id, {"plan": plan, "status": "planned"})

    @mongo_storage_errors()
    def record_produce(self, source: str, run_id: str, produce: dict[str, Any]) -> None:
        self._set(source, run_id, {"produce": produce, "status": "harvesting"})

    @mongo_storage_errors()
    def record_report(self, source: str, run_id: str, report: dict[str, Any]) -> None:
        self._set(source, run_id, {"report": report, "status": "reported"})

    def _set(self, source: str, run_id: str, fields: dict[str, Any]) -> None:
        self.collection.update_one({"source": source, "run_id": run_id}, {"$set": fields}, upsert=True)
